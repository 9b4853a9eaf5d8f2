"""The creator torch.distributed calls for each "pycomm" process group: the pycomm Communicator it runs on.

- The default group (init_process_group) runs on pycomm's world: pycomm.init() under the launcher (MPI
  under mpirun / srun --mpi=pmix, pycomm's gloo transport under torchrun), or the world already started;
  in processes no launcher describes (torch.multiprocessing, ranks given to init_process_group), on
  pycomm's gloo transport over torch's store.
- A group of every world rank in world order (new_group() without ranks) is a dup of the world.
- A group of some ranks (new_group(ranks), new_subgroups, a DeviceMesh's dimensions) is a sub-communicator
  of the world's own transport where it can make one, else of pycomm's gloo transport over the group's own
  store. torch calls the creator on the group's members only (a non-member returns before it, even when
  every rank called new_group), so a split of the whole world (MPI_Comm_split) cannot be used; on MPI the
  members make one with MPI_Comm_create_group (collective over the members alone, through mpi4py), on
  gloo they meet under the group's store. Either way the group has pycomm's op matching, stall reports
  and its own name in traces ("torch group <name>", or the mesh dimension's name)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, Optional, Sequence

from pycomm import fail_fast, launch_env, process_comms, runtime, settings
from pycomm._build import core
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.gloo import backend as gloo_backend
from pycomm.torch_backend.process_group import NAME, PycommProcessGroup

GROUP_PREFIX = "pycomm/torch_group"
WORLD_PREFIX = "pycomm/torch_world"
_default: Optional[Communicator] = None  # the default group's communicator, once made
_CREATE_GROUP_TAG = 0x7C0  # MPI_Comm_create_group's tag (creations run one at a time, on the caller's thread)


def create(opts: Any, backend_options: Any = None) -> PycommProcessGroup:
    """torch's creator (extended API): `opts` is a _DistributedBackendOptions."""
    global _default
    rank, size, ranks = opts.group_rank, opts.group_size, list(opts.global_ranks_in_group)
    if not ranks:  # the default group: it is pycomm's world
        launched = runtime.is_initialized() or _launcher_size() == size
        _default = (
            _launched_world(rank, size)
            if launched
            else process_comms.track(
                Communicator(gloo_backend.transport_over(opts.store, rank, size, WORLD_PREFIX), "world")
            )
        )
        return PycommProcessGroup(_default, owned=not launched)
    world = _default if _default is not None else runtime.init()
    _check_members(ranks, rank, size, world)
    name = f"torch group {opts.group_id}"
    if ranks == list(range(world.size)):
        comm = world.dup()
        comm.name = name
    else:
        comm = _mpi_subgroup(world, ranks, name) or Communicator(
            gloo_backend.transport_over(opts.store, rank, size, GROUP_PREFIX), name
        )
    return PycommProcessGroup(process_comms.track(comm), owned=True)


def _launcher_size() -> int:
    """How many ranks pycomm's launcher sees; 0 when the environment names no consistent launch (e.g.
    WORLD_SIZE without RANK: torch.multiprocessing's children, ranked by init_process_group's arguments)."""
    try:
        return launch_env.detect().size
    except ValueError:
        return 0


def _launched_world(rank: int, size: int) -> Communicator:
    """pycomm's world, started by its launcher (mpirun, srun, torchrun), which must agree with torch."""
    world = runtime.init()
    if (world.rank, world.size) != (rank, size):
        raise PycommError(
            f"init_process_group({NAME!r}): torch's rendezvous says rank {rank} of {size}, but "
            f"pycomm's launcher says rank {world.rank} of {world.size} ({world.backend}); launch "
            f"with mpirun or torchrun and let both read the same environment"
        )
    _keep_fail_fast_output(world)
    return world


def _keep_fail_fast_output(world: Communicator) -> None:
    """init_process_group next wraps sys.excepthook in one that captures stderr while the wrapped hook runs and
    prints the capture (each line prefixed "[rankN]:") after it returns. The wrapped hook is pycomm's fail-fast
    one (installed by pycomm.init() just now), which ends the job and never returns: the rank's traceback would
    be lost. Wrapped here first, it writes to this stderr."""
    if world.size <= 1 or not settings.get(fail_fast.FAIL_FAST_ENV) or getattr(sys.excepthook, "_pycomm", False):
        return
    inner, stream = sys.excepthook, sys.stderr

    def hook(kind: type[BaseException], value: BaseException, tb: Optional[TracebackType]) -> None:
        captured, sys.stderr = sys.stderr, stream
        try:
            inner(kind, value, tb)
        finally:
            sys.stderr = captured

    hook._pycomm = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _check_members(ranks: Sequence[int], rank: int, size: int, world: Communicator) -> None:
    """torch's view of the group against pycomm's world: the error names what disagrees."""
    if len(set(ranks)) != len(ranks) or not all(0 <= r < world.size for r in ranks):
        raise PycommError(
            f"new_group({NAME!r}): ranks {list(ranks)} must be distinct ranks of the world (0..{world.size - 1})"
        )
    if len(ranks) != size or world.rank not in ranks or ranks.index(world.rank) != rank:
        raise PycommError(
            f"new_group({NAME!r}): torch says this process is rank {rank} of {size} in the group of "
            f"world ranks {list(ranks)}, but it is world rank {world.rank} of pycomm's world"
        )


def _mpi_subgroup(world: Communicator, ranks: Sequence[int], name: str) -> Optional[Communicator]:
    """A communicator of the world's MPI transport over `ranks` (in that order), made by the members alone;
    None when the world is not MPI or mpi4py is missing (the caller then uses the gloo transport)."""
    if world.backend != "mpi":
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    settings.apply()  # the environment as it is now, for the new communicator (as Communicator.split does)
    everyone = MPI.COMM_WORLD.Get_group()
    members = everyone.Incl(list(ranks))
    try:
        sub = MPI.COMM_WORLD.Create_group(members, _CREATE_GROUP_TAG)
    finally:
        members.Free()
        everyone.Free()
    try:
        return Communicator(core().mpi_from_fortran(sub.py2f()), name)  # pycomm's transport: a duplicate of sub
    finally:
        sub.Free()
