"""Process-wide state: pycomm.init(), from_mpi4py(), finalize() and stats(); world(), abort() and the
communicators they see are pycomm.process_comms' (re-exported here)."""

from __future__ import annotations

import atexit
import sys
import warnings
from typing import Any

from pycomm import backends, fail_fast, op_stats, settings, startup_profile
from pycomm._build import build_info, core
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.launch_env import detect
from pycomm.process_comms import STATE, abort, is_initialized, launch_env, track, world
from pycomm.tracing import profiling

# world, is_initialized, launch_env and abort live in pycomm.process_comms, beside the state they read
__all__ = ["abort", "finalize", "from_mpi4py", "init", "is_initialized", "launch_env", "stats", "world"]


def init(backend: str = "auto") -> Communicator:
    """Starts pycomm in this process and returns the world communicator.

    Reads the launcher's environment (pycomm.launch_env). Under a multi-rank launcher an uncaught exception
    on any rank then ends the whole job at once with that rank's traceback (pycomm/fail_fast.py; opt out
    with PYCOMM_FAIL_FAST=0). backend: "auto" (see
    pycomm.backends.choose_auto: MPI when built and launched by an MPI launcher, gloo over a TCP
    rendezvous for several ranks MPI cannot join (torchrun, srun --mpi=none), else "local" for one
    process; NCCL/RCCL only when asked for), "mpi", "gloo", "nccl", or "local".
    Calling it again with the same (or "auto") backend returns the same world."""
    if not isinstance(backend, str):
        raise TypeError(f"init: backend must be a str, got {type(backend).__name__}")
    if STATE.finalized:
        raise PycommError("init: pycomm.finalize() was already called in this process; it cannot start again")
    if STATE.world is not None:
        if backend not in ("auto", STATE.world.backend):
            raise PycommError(
                f"init: pycomm is already initialised with backend {STATE.world.backend!r}; "
                f"cannot switch to {backend!r}"
            )
        return STATE.world
    env = detect()
    name = backends.choose_auto(env) if backend == "auto" else backend
    settings.apply()  # PYCOMM_* set after `import pycomm` count from here on
    transport = backends.get(name).create_world(env)
    STATE.env = env
    STATE.world = made = track(Communicator(transport, "world"))
    # an uncaught exception on any rank ends the job at once (pycomm/fail_fast.py; PYCOMM_FAIL_FAST=0: not)
    fail_fast.install(made.rank, made.size, lambda: list(STATE.live))
    profiling.start_from_environment(made)  # PYCOMM_TRACE / PYCOMM_FLIGHT_RECORDER
    startup_profile.mark("init")
    return made


def from_mpi4py(comm: Any) -> Communicator:
    """A pycomm communicator over the same ranks as the mpi4py communicator `comm` (collective over
    it). pycomm uses a private duplicate, so its traffic never mixes with comm's."""
    if not build_info()["mpi"]:
        raise PycommError("from_mpi4py: this build of pycomm has no MPI (install an MPI library and rebuild)")
    if not hasattr(comm, "py2f"):
        raise TypeError(f"from_mpi4py: expected an mpi4py communicator, got {type(comm).__name__}")
    if STATE.finalized:
        raise PycommError("from_mpi4py: pycomm.finalize() was already called")
    settings.apply()
    made = track(Communicator(core().mpi_from_fortran(comm.py2f()), "mpi4py"))
    fail_fast.install(made.rank, made.size, lambda: list(STATE.live))
    return made


def finalize() -> None:
    """Completes pending ops, shuts every communicator down and finalises MPI if pycomm initialised it.
    Idempotent. Called at interpreter exit when the program did not."""
    if STATE.finalized:
        return
    STATE.finalized = True
    profiling.stop_from_environment()  # PYCOMM_TRACE's files, while the communicators still work
    for comm in list(STATE.live):
        comm.shutdown()
    STATE.world = None
    if "pycomm._C" not in sys.modules:
        return  # the core never loaded (or cannot: unbuilt): no MPI to finalise, nothing to report at exit
    if build_info()["mpi"]:
        note = core().mpi_finalize()
        if note:
            warnings.warn(f"pycomm.finalize(): {note}", RuntimeWarning, stacklevel=2)


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
    return {
        op: {
            "calls": c["calls"],
            "bytes": c["bytes"],
            "seconds": c["seconds"],
            "busbw": c["bus_bytes"] / c["seconds"] if c["seconds"] > 0 else 0.0,
            "inline_calls": c["inline_calls"],
        }
        for op, c in raw.items()
    }


atexit.register(finalize)
