"""The creator torch.distributed calls for each "pycomm" process group: the pycomm Communicator it runs on.

- The default group (init_process_group) runs on pycomm's world: pycomm.init() under the launcher (MPI
  under mpirun / srun --mpi=pmix, pycomm's gloo transport under torchrun), or the world already started.
- A group of every world rank (new_group() without ranks) is a dup of the world (same transport).
- A group of some ranks (new_group(ranks), new_subgroups, DeviceMesh) runs on pycomm's gloo transport over
  the group's own store: torch creates it on its members only, while a split of the world (MPI_Comm_split)
  needs every world rank to take part."""
from __future__ import annotations

from typing import Any

from pycomm import gloo_backend, runtime
from pycomm.communicator import Communicator
from pycomm.errors import PycommError
from pycomm.torch_backend.process_group import NAME, PycommProcessGroup

GROUP_PREFIX = "pycomm/torch_group"


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
    if sorted(ranks) == list(range(world.size)) and ranks.index(world.rank) == rank:
        comm = world.dup()
    else:
        transport = gloo_backend.transport_over(opts.store, rank, size, GROUP_PREFIX)
        comm = Communicator(transport, f"torch group {opts.group_id}")
    return PycommProcessGroup(comm)
