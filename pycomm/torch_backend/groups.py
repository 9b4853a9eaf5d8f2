"""The creator torch.distributed calls for each "pycomm" process group: the pycomm Communicator it runs on.

- The default group (init_process_group) runs on pycomm's world: pycomm.init() under the launcher (MPI
  under mpirun / srun --mpi=pmix, pycomm's gloo transport under torchrun), or the world already started.
- A group of every world rank in world order (new_group() without ranks) is a dup of the world.
- A group of some ranks (new_group(ranks), new_subgroups, a DeviceMesh's dimensions) is a sub-communicator
  of the world's own transport where it can make one, else of pycomm's gloo transport over the group's own
  store. torch calls the creator on the group's members only (a non-member returns before it, even when
  every rank called new_group), so a split of the whole world (MPI_Comm_split) cannot be used; on MPI the
  members make one with MPI_Comm_create_group (collective over the members alone, through mpi4py), on
  gloo they meet under the group's store. Either way the group has pycomm's op matching, stall reports
  and its own name in traces ("torch group <name>", or the mesh dimension's name)."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from pycomm import gloo_backend, runtime, settings
from pycomm._build import core
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.torch_backend.process_group import NAME, PycommProcessGroup

GROUP_PREFIX = "pycomm/torch_group"
_CREATE_GROUP_TAG = 0x7C0  # MPI_Comm_create_group's tag (creations run one at a time, on the caller's thread)


def create(opts: Any, backend_options: Any = None) -> PycommProcessGroup:
    """torch's creator (extended API): `opts` is a _DistributedBackendOptions."""
    rank, size, ranks = opts.group_rank, opts.group_size, list(opts.global_ranks_in_group)
    world = runtime.init()
    if not ranks:  # the default group: it is pycomm's world
        if (world.rank, world.size) != (rank, size):
            raise PycommError(f"init_process_group({NAME!r}): torch's rendezvous says rank {rank} of {size}, but "
                              f"pycomm's launcher says rank {world.rank} of {world.size} ({world.backend}); launch "
                              f"with mpirun or torchrun and let both read the same environment")
        return PycommProcessGroup(world)
    _check_members(ranks, rank, size, world)
    name = f"torch group {opts.group_id}"
    if ranks == list(range(world.size)):
        comm = world.dup()
        comm.name = name
    else:
        comm = _mpi_subgroup(world, ranks, name) or Communicator(
            gloo_backend.transport_over(opts.store, rank, size, GROUP_PREFIX), name)
    return PycommProcessGroup(runtime._track(comm), owned=True)


def _check_members(ranks: Sequence[int], rank: int, size: int, world: Communicator) -> None:
    """torch's view of the group against pycomm's world: the error names what disagrees."""
    if len(set(ranks)) != len(ranks) or not all(0 <= r < world.size for r in ranks):
        raise PycommError(f"new_group({NAME!r}): ranks {list(ranks)} must be distinct ranks of the world "
                          f"(0..{world.size - 1})")
    if len(ranks) != size or world.rank not in ranks or ranks.index(world.rank) != rank:
        raise PycommError(f"new_group({NAME!r}): torch says this process is rank {rank} of {size} in the group of "
                          f"world ranks {list(ranks)}, but it is world rank {world.rank} of pycomm's world")


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
