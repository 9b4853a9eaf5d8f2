"""Text <-> token ids for the served model, and decoding of a token stream into events that never
split a multi-byte character: each token's UTF-8 bytes go through an incremental decoder, which
holds back an incomplete sequence until its last byte arrives (a char vocabulary never has one; a
byte-level vocabulary, whose tokens are single bytes, does)."""

from __future__ import annotations

import codecs


class Vocabulary:
    def __init__(self, tokens: list[str] | list[bytes] | str):
        self.tokens = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in tokens]
        self.lookup = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (one per character); ValueError naming the characters not in the vocabulary."""
        ids, unknown = [], []
        for ch in text:
            i = self.lookup.get(ch.encode("utf-8"))
            if i is None:
                unknown.append(ch)
            ids.append(i)
        if unknown:
            shown = "".join(sorted(set(unknown)))[:20]
            raise ValueError(
                f"prompt: characters {shown!r} are not in the model's vocabulary of {len(self)} "
                "characters (GET /config lists it)"
            )
        return ids

    def decoder(self) -> "StreamDecoder":
        return StreamDecoder(self)


class StreamDecoder:
    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        """The complete characters this token finishes ('' while a character is still incomplete)."""
        return self.utf8.decode(self.vocab.tokens[token])

    def flush(self) -> str:
        """What is left at the end of the stream (an incomplete character becomes U+FFFD)."""
        return self.utf8.decode(b"", final=True)
