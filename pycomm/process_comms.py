"""The communicators of this process, apart from how they are made (pycomm.runtime): the world one,
every live one, and abort(), which ends them all. The modules runtime starts (fail_fast, profiling)
reach them here, so none of them imports runtime back."""

from __future__ import annotations

import os
import sys
import weakref
from typing import NoReturn, Optional

from pycomm._build import build_info, core
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.launch_env import LaunchEnv


class _State:
    """What pycomm.init() and pycomm.finalize() change."""

    def __init__(self) -> None:
        self.world: Optional[Communicator] = None
        self.env: Optional[LaunchEnv] = None
        self.finalized = False
        self.live: "weakref.WeakSet[Communicator]" = weakref.WeakSet()  # shut down by finalize, aborted by abort


STATE = _State()


def is_initialized() -> bool:
    return STATE.world is not None


def world() -> Communicator:
    """The communicator over all ranks; raises PycommError before pycomm.init()."""
    if STATE.world is None:
        raise PycommError(
            "pycomm.world(): pycomm is not initialised; call pycomm.init() first"
            + (" (pycomm.finalize() was called)" if STATE.finalized else "")
        )
    return STATE.world


def launch_env() -> LaunchEnv:
    """How this process was launched (after init)."""
    world()
    assert STATE.env is not None
    return STATE.env


def track(comm: Communicator) -> Communicator:
    STATE.live.add(comm)
    return comm


def abort(reason: str = "", exit_code: int = 1) -> NoReturn:
    """Ends this process, and the job with it, because this rank failed: call it instead of raising
    when the other ranks would otherwise wait in their next collective until PYCOMM_TIMEOUT.

    Writes `reason` (when not empty) to stderr as one line, aborts every live NCCL/RCCL communicator
    (peers' pending ops then fail instead of hanging), then MPI_Abort(MPI_COMM_WORLD, exit_code) when
    MPI runs (mpirun / srun end every rank and exit with exit_code), else exits this process with
    exit_code (torchrun ends the others; srun does with --kill-on-bad-exit=1). Nothing is finalised:
    pending ops of this rank are abandoned."""
    if not isinstance(reason, str):
        raise TypeError(f"abort: reason must be a str, got {type(reason).__name__}")
    if not isinstance(exit_code, int) or isinstance(exit_code, bool) or not 1 <= exit_code <= 255:
        raise ValueError(f"abort: exit_code must be an int in [1, 255] (0 would read as success), got {exit_code!r}")
    if reason:
        print(reason, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream must not stop the abort
            pass
    for comm in list(STATE.live):
        comm._t.abort(reason or "pycomm.abort()")
    if build_info()["mpi"]:
        core().mpi_abort(exit_code)  # returns only when MPI is not running
    os._exit(exit_code)
