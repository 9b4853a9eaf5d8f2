"""Worker of tests/comm/test_torch_backend_fsdp.py: FSDP2's fully_shard, unchanged, on backend "pycomm"
against the same model on gloo. argv[1]: "1d" (every rank one shard group) or "hsdp" (4 ranks, a (2, 2)
DeviceMesh: replicate over dim 0, shard over dim 1; its groups are pycomm sub-communicators)."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import pycomm
from tests.comm.workers.torch_backend_models import mlp, same, train

STEPS = 4


def sharded(mesh: DeviceMesh) -> list[torch.Tensor]:
    model = mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return [p.full_tensor() for p in (torch.nn.Parameter(t) for t in train(model, STEPS))]


def main(kind: str) -> None:
    dist.init_process_group("pycomm")
    size = dist.get_world_size()
    shape = (size,) if kind == "1d" else (2, size // 2)
    names = ("shard",) if kind == "1d" else ("replicate", "shard")
    before = pycomm.stats().get("reduce_scatter", {}).get("calls", 0)
    on_pycomm = sharded(init_device_mesh("cpu", shape, mesh_dim_names=names))
    reduce_scatters = pycomm.stats()["reduce_scatter"]["calls"] - before
    gloo_ranks = torch.arange(size).view(shape)
    gloo_world = dist.new_group(backend="gloo")
    if kind == "1d":
        gloo_mesh = DeviceMesh.from_group(gloo_world, "cpu", mesh_dim_names=names)
    else:
        groups = _gloo_mesh_groups(gloo_ranks)
        gloo_mesh = DeviceMesh.from_group(groups, "cpu", mesh=gloo_ranks, mesh_dim_names=names)
    on_gloo = sharded(gloo_mesh)
    # 2 ranks: a sum of two is the same in any order, so bit for bit; 4 ranks may add in another order
    same(on_pycomm, on_gloo, f"FSDP2 ({kind}) on pycomm vs gloo", exact=size == 2)
    assert reduce_scatters >= STEPS, f"expected FSDP2's reduce-scatters to run through pycomm, saw {reduce_scatters}"
    print(
        f"rank {dist.get_rank()}: fsdp2 {kind} on pycomm == gloo after {STEPS} steps "
        f"({reduce_scatters} pycomm reduce-scatters)",
        flush=True,
    )
    dist.destroy_process_group()


def _gloo_mesh_groups(ranks: torch.Tensor) -> list[dist.ProcessGroup]:
    """This rank's gloo group along each mesh dimension (every rank creates every group, as torch asks)."""
    mine = []
    for dim in range(ranks.dim()):
        for row in ranks.transpose(dim, -1).reshape(-1, ranks.shape[dim]).tolist():
            group = dist.new_group(row, backend="gloo")
            if dist.get_rank() in row:
                mine.append(group)
    return mine


if __name__ == "__main__":
    main(sys.argv[1])
