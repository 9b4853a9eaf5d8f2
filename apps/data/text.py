"""A character-level dataset from any text file; with no path, the embedded tiny Shakespeare (the GPT's
default, so every GPT config runs on a fresh clone with no download)."""

from __future__ import annotations

from pathlib import Path

import torch

from apps.data.dataset import Splits
from apps.option_rules import OptionValueError, whole

EMBEDDED_TEXT = Path(__file__).resolve().parent / "embedded" / "tinyshakespeare.txt"


class CharWindows:
    """Windows of block_size characters starting every `stride` characters; target = input shifted by one."""

    def __init__(self, tokens: torch.Tensor, block_size: int, stride: int):
        if len(tokens) <= block_size:
            raise ValueError(f"text of {len(tokens)} characters is too short for block_size {block_size}")
        self.tokens, self.block_size, self.stride = tokens, block_size, stride
        self.offsets = torch.arange(0, len(tokens) - block_size, stride)

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = self.offsets[indices].unsqueeze(1) + torch.arange(self.block_size + 1)
        window = self.tokens[pos]
        return window[:, :-1], window[:, 1:]


def source(path: str | Path | None) -> Path:
    """The text file read: `path`, or the embedded tiny Shakespeare when it is unset."""
    return Path(path) if path else EMBEDDED_TEXT


def check_options(values: dict, where: str) -> None:
    """load()'s option values (with its defaults), before any rank starts."""
    whole("block_size", "stride")(values, where)
    fraction = values.get("eval_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise OptionValueError(f"{where}.eval_fraction={fraction!r}: expected a number >= 0 and < 1")


def check_path(
    path: str | Path | None = None, block_size: int = 256, eval_fraction: float = 0.1, **options: object
) -> None:
    """What load() needs on disk, checked before any rank starts: the file, and a text long enough for one
    window of block_size (+1: the targets) characters in each split. The file is read only when its size
    leaves that in doubt."""
    file = source(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"data.path={str(path)!r} is not a file (data.name=text reads one text file; "
            "give one with -o data.path=PATH, or leave data.path unset for the embedded "
            "tiny Shakespeare)"
        )
    if not isinstance(block_size, int) or not isinstance(eval_fraction, (int, float)) or not 0 <= eval_fraction < 1:
        return  # check_options names those
    if min(_split_lengths(file.stat().st_size // 4, eval_fraction)) > block_size:
        return  # at least a character per 4 bytes (UTF-8): long enough whatever the text
    chars = len(file.read_text(encoding="utf-8"))
    train, held = _split_lengths(chars, eval_fraction)
    if min(train, held) <= block_size:
        splits = f"{train} for training" + (
            f" and {held} for evaluation (eval_fraction={eval_fraction})" if eval_fraction > 0 else ""
        )
        raise ValueError(
            f"data.options.block_size={block_size}: the text {str(file)!r} has {chars} characters, "
            f"{splits}; each split needs more than block_size: choose block_size < {min(train, held)}"
        )


def _split_lengths(chars: int, eval_fraction: float) -> tuple[int, int]:
    """Characters of the training and the evaluation split (none held out: the training split twice)."""
    cut = int(chars * (1 - eval_fraction))
    return cut, (chars - cut) if eval_fraction > 0 else cut


def vocabulary(text: str) -> str:
    """The characters of `text`, sorted: token i is vocabulary(text)[i] (what the GPT trained on)."""
    return "".join(sorted(set(text)))


def load(
    path: str | Path | None = None, block_size: int = 256, stride: int | None = None, eval_fraction: float = 0.1
) -> Splits:
    check_path(path, block_size, eval_fraction)
    text = source(path).read_text(encoding="utf-8")
    vocab = vocabulary(text)
    lookup = {c: i for i, c in enumerate(vocab)}
    tokens = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    cut = int(len(tokens) * (1 - eval_fraction))  # first 90% train, last 10% eval, as nanoGPT
    stride = stride or block_size
    held = CharWindows(tokens[cut:], block_size, stride) if eval_fraction > 0 else None
    return Splits(
        CharWindows(tokens[:cut], block_size, stride),
        held,
        {"vocab_size": len(vocab), "block_size": block_size, "vocab": "".join(vocab)},
    )
