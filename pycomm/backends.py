"""The registry of transports pycomm.init() can start. A backend is a name, a test of whether this
build and machine can run it, and a factory of the world transport from the launch environment.

The built-in backends are "mpi" and "local" (one rank, no library). Others register themselves on
import: the modules named in PLUGINS are imported on first use, so `pycomm.init(backend="nccl")`
finds the NCCL backend (and "gloo" torch.distributed's gloo) without the core depending on them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from pycomm import startup_profile
from pycomm._build import build_info, core
from pycomm.errors import PycommError
from pycomm.launch_env import LaunchEnv

# backend name -> module that calls register() when imported
PLUGINS: dict[str, str] = {"nccl": "pycomm.nccl_backend", "gloo": "pycomm.gloo.backend"}


@dataclass(frozen=True)
class Backend:
    name: str
    # "" when usable here, else why not (shown to the user)
    unavailable_reason: Callable[[], str]
    # the world transport (a pycomm._C.Transport) for this launch environment
    create_world: Callable[[LaunchEnv], Any]
    # whether "auto" prefers it over MPI (no built-in backend is preferred: see choose_auto)
    preferred: Callable[[], bool] = lambda: False


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    _REGISTRY[backend.name] = backend


def _load_plugins() -> None:
    for name, module in PLUGINS.items():
        if name not in _REGISTRY:
            try:
                importlib.import_module(module)
            except ImportError:
                pass


def names() -> list[str]:
    _load_plugins()
    return sorted(set(_REGISTRY) | set(PLUGINS))


def get(name: str) -> Backend:
    """The backend `name`, usable here; raises ValueError (unknown) or PycommError (not usable)."""
    _load_plugins()
    if name not in _REGISTRY:
        if name in PLUGINS:
            raise PycommError(
                f"backend {name!r} is not available in this installation of pycomm "
                f"(module {PLUGINS[name]} could not be imported; build_info: {build_info()})"
            )
        raise ValueError(f"backend must be one of 'auto', {', '.join(repr(n) for n in names())}; got {name!r}")
    backend = _REGISTRY[name]
    why = backend.unavailable_reason()
    if why:
        raise PycommError(f"backend {name!r} cannot be used: {why}")
    return backend


def choose_auto(env: LaunchEnv) -> str:
    """The rule of backend="auto": a usable backend registered as preferred (none of the built-in ones
    is); else "mpi" when the build has MPI and MPI_Init can join the launch (mpirun, mpiexec, srun
    --mpi=pmix/pmi2); else "gloo" (torch.distributed's, over a TCP rendezvous) for several ranks that MPI
    cannot wire up (torchrun, srun --mpi=none, RANK/WORLD_SIZE by hand); else "local" for a single
    process. NCCL/RCCL is never picked by "auto" (a visible GPU says neither that the tensors live there
    nor that each rank has its own GPU): GPU training asks for backend="nccl"."""
    _load_plugins()
    for b in _REGISTRY.values():
        if b.preferred() and not b.unavailable_reason():
            return b.name
    if build_info()["mpi"] and env.mpi_launched:
        return "mpi"
    if env.size == 1:
        return "local"
    if "gloo" in _REGISTRY and not _REGISTRY["gloo"].unavailable_reason():
        return "gloo"
    if build_info()["mpi"]:
        return "mpi"  # its start-up names the launcher MPI could not join
    raise PycommError(
        f"this process is rank {env.rank} of {env.size} ({env.launcher}), but neither this build of "
        f"pycomm has MPI nor this torch has gloo to connect the ranks (build_info: {build_info()}); "
        f"install a torch with torch.distributed, or an MPI (apt-get install libopenmpi-dev) and "
        f"rebuild, or run a single process"
    )


def _mpi_reason() -> str:
    return (
        ""
        if build_info()["mpi"]
        else (
            "this build of pycomm has no MPI: install an MPI library "
            "(apt-get install libopenmpi-dev, or the cluster's module) and rebuild"
        )
    )


def _mpi_world(env: LaunchEnv) -> Any:
    if startup_profile.enabled():  # MPI_Init timed apart from the communicator's own set-up
        core().mpi_info()
        startup_profile.mark("mpi_init")
    t = core().mpi_world()
    if env.launcher != "single" and (t.size != env.size or t.rank != env.rank):
        raise PycommError(
            f"the {env.launcher} environment says rank {env.rank} of {env.size}, but MPI reports rank "
            f"{t.rank} of {t.size}: MPI was not started by this launcher. Launch with mpirun/mpiexec "
            f"or `srun --mpi=pmix`, or use backend='gloo' (CPU) or 'nccl' (GPU), which rendezvous over "
            f"TCP at MASTER_ADDR:MASTER_PORT"
        )
    return t


def _local_world(env: LaunchEnv) -> Any:
    if env.size != 1:
        raise PycommError(
            f"backend 'local' runs a single process, but the {env.launcher} environment says rank "
            f"{env.rank} of {env.size}; use backend='auto', 'mpi', 'gloo' or 'nccl'"
        )
    return core().local_transport()


register(Backend("mpi", _mpi_reason, _mpi_world))
register(Backend("local", lambda: "", _local_world))
