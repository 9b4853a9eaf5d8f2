"""Fail fast in any script: under a multi-rank launcher, pycomm.init() (and pycomm.from_mpi4py) installs

- an excepthook: an uncaught exception on any rank prints that rank's traceback (through the hook that
  was installed before, Python's own by default) and a line naming the rank, then ends the whole job at
  once with pycomm.abort (MPI_Abort under mpirun / srun; the process's exit under torchrun, which ends the
  others), instead of leaving the other ranks waiting in their next collective until PYCOMM_TIMEOUT;
- an exit check: a rank that leaves with ops it never waited for waits for them (each up to
  PYCOMM_TIMEOUT, as pycomm.finalize would) and, when one fails or stalls (its peers left, or disagree),
  ends the job with the op's error instead of hanging or failing inside the interpreter's shutdown.

PYCOMM_FAIL_FAST=0 installs neither (pycomm/settings.py). apps.train handles its own failures
(apps/failure.py) before they reach the hook."""

from __future__ import annotations

import atexit
import sys
from types import TracebackType
from typing import Any, Callable, Iterable

from pycomm import settings

FAIL_FAST_ENV = "PYCOMM_FAIL_FAST"
EXIT_UNCAUGHT, EXIT_INTERRUPTED = 1, 130  # Python's own exit code for an uncaught exception; Ctrl-C's

_installed = False


def install(rank: int, size: int, live: Callable[[], Iterable[Any]]) -> None:
    """Install the hook and the exit check once, for a world of `size` ranks (nothing for one rank or
    with PYCOMM_FAIL_FAST=0). `live()`: the communicators whose ops the exit check waits for."""
    global _installed
    if _installed or size <= 1 or not settings.get(FAIL_FAST_ENV):
        return
    _installed = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        _abort(
            f"pycomm: rank {rank} of {size} raised an uncaught {kind.__name__}; ending the job "
            f"({FAIL_FAST_ENV}=0 keeps Python's own handling)",
            EXIT_INTERRUPTED if issubclass(kind, KeyboardInterrupt) else EXIT_UNCAUGHT,
        )

    sys.excepthook = hook
    atexit.register(
        _complete_in_flight, rank, size, live
    )  # runs before pycomm.finalize (registered after it: atexit runs last-in first-out)


def _complete_in_flight(rank: int, size: int, live: Callable[[], Iterable[Any]]) -> None:
    for comm in list(live()):
        pending = [w for w in list(getattr(comm, "_in_flight", ())) if not w.is_completed()]
        for work in pending:
            try:
                work.wait()
            except Exception as e:  # noqa: BLE001  (any failure of an op left behind ends the job)
                _abort(
                    f"pycomm: rank {rank} of {size} is exiting with {len(pending)} op(s) it never waited for on "
                    f"its {comm.name} communicator, and one failed ({type(e).__name__}: {e}); ending the job",
                    EXIT_UNCAUGHT,
                )


def _abort(reason: str, code: int) -> None:
    from pycomm.process_comms import abort  # the core loads only when a rank aborts

    abort(reason, code)
