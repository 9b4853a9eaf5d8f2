"""Per-phase timestamps of the quantized all-reduce pipeline, for benchmarks/collectives.py's shaped-link
profile: which phase of which segment ran when (encode, the wait for the all-to-all, reduce and re-encode,
the wait for the all-gather, decode). Off unless `profile_phases()` is active; then each phase costs
two clock reads and a list append.

    with profile_phases() as log:
        comm.allreduce_quantized(t, op=pycomm.AVG, async_op=True).wait()
    log.totals()      # {"encode": seconds, "wire_alltoall": ..., ...} summed over segments"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ContextManager, Iterator

from pycomm import tracing

# The phases of one segment, in pipeline order ("wire_*": the helper thread blocked on a transfer).
PHASES = ("encode", "wire_alltoall", "reduce_reencode", "wire_allgather", "decode")


@dataclass
class PhaseLog:
    """Rows of (call, segment, phase, start, end); times are time.perf_counter() seconds."""

    rows: list[tuple[int, int, str, float, float]] = field(default_factory=list)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def new_call(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls - 1

    @contextmanager
    def phase(self, call: int, segment: int, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.rows.append((call, segment, name, t0, time.perf_counter()))

    def totals(self) -> dict[str, float]:
        """Seconds per phase, summed over every segment of every call (per call: divide by `calls`)."""
        out = dict.fromkeys(PHASES, 0.0)
        for _, _, name, t0, t1 in self.rows:
            out[name] += t1 - t0
        return out


_ACTIVE: PhaseLog | None = None


@contextmanager
def profile_phases() -> Iterator[PhaseLog]:
    """Record the phases of every quantized all-reduce that starts inside the block."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, PhaseLog()
    try:
        yield _ACTIVE
    finally:
        _ACTIVE = previous


class PhaseClock:
    """The pipeline's handle: `with clock(segment, "encode"): ...` records when profiling, and while
    tracing (pycomm/tracing/__init__.py) a span of the segment's step on `comm`; else nothing."""

    def __init__(self) -> None:
        self.log = _ACTIVE
        self.call = self.log.new_call() if self.log is not None else -1
        self.comm: Any = None  # set by the pipeline: the communicator its spans belong to

    def __call__(self, segment: int, name: str) -> ContextManager[None]:
        if tracing.ACTIVE and self.comm is not None:
            return self._traced(segment, name)
        return nullcontext() if self.log is None else self.log.phase(self.call, segment, name)

    @contextmanager
    def _traced(self, segment: int, name: str) -> Iterator[None]:
        span = tracing.span(name, self.comm, segment=segment)
        try:
            with nullcontext() if self.log is None else self.log.phase(self.call, segment, name):
                yield
        finally:
            tracing.end(span)
