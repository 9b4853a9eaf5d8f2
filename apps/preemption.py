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
        for s in SIGNALS:
            signal.signal(s, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:  # the first signal is the one that asked for the stop
            self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def close(self) -> None:
        """The run is over and the process about to exit: ignore SIGTERM / SIGUSR1 from now on. A
        scheduler or launcher may repeat them while the ranks shut down; the default action (which
        Python's own shutdown reinstates for handlers like ours) would kill a rank after its save."""
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
