"""Worker of tests/comm/test_torch_backend.py: 3 processes started by torch.multiprocessing.spawn, each told its
rank by init_process_group("pycomm", init_method="file://...", rank=, world_size=) (no launcher pycomm could
read): the default group and a sub-group run on pycomm's gloo transport over torch's store."""

from __future__ import annotations

import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pycomm  # noqa: F401  (registers the backend)
from pycomm.torch_backend import PycommProcessGroup

SIZE = 3


def run(rank: int, path: str) -> None:
    dist.init_process_group("pycomm", init_method=f"file://{path}", rank=rank, world_size=SIZE)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(range(SIZE)), t
    pair = dist.new_group([0, 2])
    if rank in (0, 2):
        assert isinstance(pair, PycommProcessGroup) and pair.comm.size == 2, pair
        dist.all_reduce(t, group=pair)
        assert t.item() == 2 * sum(range(SIZE)), t
    print(f"rank {rank}: spawned ranks on {dist.group.WORLD.comm.backend}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(f"{tmp}/store",), nprocs=SIZE)
    sys.exit(0)
