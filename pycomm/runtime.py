"""Process-wide state: pycomm.init(), world(), from_mpi4py(), finalize() and stats()."""
from __future__ import annotations

import atexit
import os
import sys
import warnings
import weakref
from typing import Any, NoReturn, Optional

from pycomm import backends, fail_fast, op_stats, profiling, settings, startup_profile
from pycomm._build import build_info, core
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.launch_env import LaunchEnv, detect

_world: Optional[Communicator] = None
_env: Optional[LaunchEnv] = None
_finalized = False
_live: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


def init(backend: str = "auto") -> Communicator:
    """Starts pycomm in this process and returns the world communicator.

    Reads the launcher's environment (pycomm.launch_env). Under a multi-rank launcher an uncaught exception
    on any rank then ends the whole job at once with that rank's traceback (pycomm/fail_fast.py; opt out
    with PYCOMM_FAIL_FAST=0). backend: "auto" (see
    pycomm.backends.choose_auto: MPI when built and launched by an MPI launcher, gloo over a TCP
    rendezvous for several ranks MPI cannot join (torchrun, srun --mpi=none), else "local" for one
    process; NCCL/RCCL only when asked for), "mpi", "gloo", "nccl", or "local".
    Calling it again with the same (or "auto") backend returns the same world."""
    global _world, _env
    if not isinstance(backend, str):
        raise TypeError(f"init: backend must be a str, got {type(backend).__name__}")
    if _finalized:
        raise PycommError("init: pycomm.finalize() was already called in this process; it cannot start again")
    if _world is not None:
        if backend not in ("auto", _world.backend):
            raise PycommError(f"init: pycomm is already initialised with backend {_world.backend!r}; "
                              f"cannot switch to {backend!r}")
        return _world
    env = detect()
    name = backends.choose_auto(env) if backend == "auto" else backend
    settings.apply()  # PYCOMM_* set after `import pycomm` count from here on
    transport = backends.get(name).create_world(env)
    _env = env
    _world = _track(Communicator(transport, "world"))
    # an uncaught exception on any rank ends the job at once (pycomm/fail_fast.py; PYCOMM_FAIL_FAST=0: not)
    fail_fast.install(_world.rank, _world.size, lambda: list(_live))
    profiling.start_from_environment(_world)   # PYCOMM_TRACE / PYCOMM_FLIGHT_RECORDER
    startup_profile.mark("init")
    return _world


def is_initialized() -> bool:
    return _world is not None


def world() -> Communicator:
    """The communicator over all ranks; raises PycommError before pycomm.init()."""
    if _world is None:
        raise PycommError("pycomm.world(): pycomm is not initialised; call pycomm.init() first"
                          + (" (pycomm.finalize() was called)" if _finalized else ""))
    return _world


def launch_env() -> LaunchEnv:
    """How this process was launched (after init)."""
    world()
    assert _env is not None
    return _env


def from_mpi4py(comm: Any) -> Communicator:
    """A pycomm communicator over the same ranks as the mpi4py communicator `comm` (collective over
    it). pycomm uses a private duplicate, so its traffic never mixes with comm's."""
    if not build_info()["mpi"]:
        raise PycommError("from_mpi4py: this build of pycomm has no MPI (install an MPI library and rebuild)")
    if not hasattr(comm, "py2f"):
        raise TypeError(f"from_mpi4py: expected an mpi4py communicator, got {type(comm).__name__}")
    if _finalized:
        raise PycommError("from_mpi4py: pycomm.finalize() was already called")
    settings.apply()
    made = _track(Communicator(core().mpi_from_fortran(comm.py2f()), "mpi4py"))
    fail_fast.install(made.rank, made.size, lambda: list(_live))
    return made


def _track(comm: Communicator) -> Communicator:
    _live.add(comm)
    return comm


def finalize() -> None:
    """Completes pending ops, shuts every communicator down and finalises MPI if pycomm initialised it.
    Idempotent. Called at interpreter exit when the program did not."""
    global _world, _finalized
    if _finalized:
        return
    _finalized = True
    profiling.stop_from_environment()    # PYCOMM_TRACE's files, while the communicators still work
    for comm in list(_live):
        comm.shutdown()
    _world = None
    if "pycomm._C" not in sys.modules:
        return  # the core never loaded (or cannot: unbuilt): no MPI to finalise, nothing to report at exit
    if build_info()["mpi"]:
        note = core().mpi_finalize()
        if note:
            warnings.warn(f"pycomm.finalize(): {note}", RuntimeWarning, stacklevel=2)


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
    for comm in list(_live):
        comm._t.abort(reason or "pycomm.abort()")
    if build_info()["mpi"]:
        core().mpi_abort(exit_code)  # returns only when MPI is not running
    os._exit(exit_code)


def stats(reset: bool = False) -> dict[str, dict[str, float]]:
    """Per-op counters of this process: {op: {calls, bytes, seconds, busbw, inline_calls}}. bytes is the
    op's data size as nccl-tests counts it (all-gather: output, reduce-scatter: input), seconds the time
    from the op's start on its queue to completion, busbw = bytes * bus factor / seconds in bytes/s (bus
    factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather / reduce-scatter / all-to-all, 1 else).
    inline_calls: of calls, those run on the caller's own thread (async_op=False while nothing else
    of that communicator was queued or in flight; at most PYCOMM_INLINE_BYTES, except the ops that run
    there at any size: see PYCOMM_INLINE_BYTES)."""
    raw = op_stats.merged(core().stats(), reset)  # the core's transports and the gloo transport's
    if reset:
        core().stats_reset()
    return {op: {"calls": c["calls"], "bytes": c["bytes"], "seconds": c["seconds"],
                 "busbw": c["bus_bytes"] / c["seconds"] if c["seconds"] > 0 else 0.0,
                 "inline_calls": c["inline_calls"]}
            for op, c in raw.items()}


atexit.register(finalize)
