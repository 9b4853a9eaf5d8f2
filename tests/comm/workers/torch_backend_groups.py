"""Worker of tests/comm/test_torch_backend_groups.py, on 4 ranks: sub-groups of backend "pycomm" made by
new_group (every rank calling it, and members only with use_local_synchronization), new_subgroups and a 2-D
init_device_mesh are pycomm sub-communicators of the world's own transport (MPI under mpirun, gloo under
torchrun): their collectives and sends give the expected values, a mesh dimension's communicator carries its
name for traces, and a mismatched collective inside a sub-group raises pycomm's MismatchError there."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import pycomm
from pycomm.torch_backend import PycommProcessGroup


def _comm(group: dist.ProcessGroup) -> pycomm.Communicator:
    backend = group if isinstance(group, PycommProcessGroup) else group._get_backend(torch.device("cpu"))
    assert isinstance(backend, PycommProcessGroup), f"expected a pycomm process group, got {type(backend)}"
    return backend.comm


def _summed(group: dist.ProcessGroup, members: list[int]) -> None:
    """The group's all_reduce of the world ranks is their sum; its communicator is over its members only,
    on the world's transport."""
    comm = _comm(group)
    assert (comm.size, comm.rank) == (len(members), members.index(dist.get_rank())), (comm, members)
    assert comm.backend == pycomm.world().backend, f"{comm!r} is not on the world's {pycomm.world().backend}"
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t, group=group)
    assert t.item() == sum(members), f"all_reduce over {members}: {t.item()}"


def main() -> None:
    dist.init_process_group("pycomm")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 4, "this worker runs on 4 ranks"

    odd = dist.new_group([1, 3])  # every rank calls it; only 1 and 3 get a group
    if rank in (1, 3):
        _summed(odd, [1, 3])
        got = torch.empty(2)
        if rank == 1:
            dist.send(torch.full((2,), 7.0), dst=3, group=odd)
        else:
            dist.recv(got, src=1, group=odd)
            assert got.tolist() == [7.0, 7.0], got
    if rank in (0, 2):  # members only
        _summed(dist.new_group([0, 2], use_local_synchronization=True), [0, 2])

    mine, _ = dist.new_subgroups(2)  # [0, 1] and [2, 3]
    _summed(mine, [rank - rank % 2, rank - rank % 2 + 1])

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim, members in (("dp", [rank % 2, rank % 2 + 2]), ("tp", [rank - rank % 2, rank - rank % 2 + 1])):
        group = mesh.get_group(dim)
        _summed(group, members)
        assert _comm(group).mesh_dim == dim, (dim, _comm(group).mesh_dim)

    pair = dist.new_group([0, 1])  # a mismatch inside a sub-group
    if rank in (0, 1):
        t = torch.ones(100)
        try:
            dist.all_reduce(t, group=pair) if rank == 0 else dist.broadcast(t, src=0, group=pair)
        except pycomm.MismatchError as e:
            print(f"rank {rank}: sub-group MismatchError: {e}", flush=True)
        else:
            raise AssertionError("a mismatched collective in a pycomm sub-group raised nothing")
    dist.barrier()
    print(f"rank {rank}: groups passed on {pycomm.world().backend}", flush=True)


if __name__ == "__main__":
    main()
