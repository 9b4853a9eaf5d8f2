"""Stop strings (OpenAI's `stop`): generation ends at the first occurrence of any of them in the
generated text, which is cut before it. Streamed text that could still be the start of a stop
string is held back until the next tokens decide, so a stop string never reaches the client."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.held = ""  # decoded text not yet released
        self.stopped = False

    def feed(self, text: str) -> str:
        """The text that is safe to release now (after `text` arrived); sets `stopped` at a stop string."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self.held += text
        cut = min((i for i in (self.held.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            out, self.held = self.held[:cut], ""
            return out
        keep = max(
            (n for s in self.stops for n in range(min(len(s) - 1, len(self.held)), 0, -1) if self.held.endswith(s[:n])),
            default=0,
        )  # the longest tail that may start a stop string
        out, self.held = self.held[: len(self.held) - keep], self.held[len(self.held) - keep :]
        return out

    def flush(self) -> str:
        """At the end (no stop string came): whatever was held back."""
        out, self.held = ("" if self.stopped else self.held), ""
        return out
