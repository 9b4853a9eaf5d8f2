"""SIGTERM / SIGUSR1 (what SLURM sends before a time limit) only set a flag; the training loop saves a
`.preempt` checkpoint at the next step boundary and exits 0. Nothing is saved inside the handler:
a step half-applied or a collective half-done must never reach a checkpoint."""
from __future__ import annotations

import signal
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionFlag:
    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
