"""Worker of benchmarks/ddp_backend.py (mpirun, any number of ranks): DDP or FSDP2 (fully_shard on a 1-D
mesh) on the MNIST CNN with the process group on backend "pycomm" and on a gloo group, alternating repeat
by repeat; samples/s of the slowest rank.

    python benchmarks/workers/ddp_backend_run.py --wrapper ddp --steps 60 --repeats 5 --out rows.json"""

from __future__ import annotations

import argparse
import gc
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm
from benchmarks.mnist_cnn import TinyCNN, shard_batches, split
from benchmarks.workers.rank0_result import write_result_and_close

WARMUP = 5


def wrapped(wrapper: str, group: dist.ProcessGroup) -> torch.nn.Module:
    """The CNN under DDP, or sharded by FSDP2 over a 1-D mesh of `group`."""
    torch.manual_seed(0)
    if wrapper == "ddp":
        return DDP(TinyCNN(), process_group=group)
    model = TinyCNN()
    fully_shard(model, mesh=DeviceMesh.from_group(group, "cpu"))
    return model


def samples_per_s(
    wrapper: str, group: dist.ProcessGroup, x: torch.Tensor, y: torch.Tensor, batches: list[torch.Tensor]
) -> float:
    model = wrapped(wrapper, group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(idx: torch.Tensor) -> None:
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()

    for idx in batches[:WARMUP]:
        step(idx)
    dist.barrier(group)
    t0 = time.perf_counter()
    for idx in batches[WARMUP:]:
        step(idx)
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's time
    n = sum(len(i) for i in batches[WARMUP:]) * dist.get_world_size(group)
    model = opt = None  # this run's model and optimizer (held by step too) freed before the next run
    gc.collect()
    return n / elapsed.item()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--wrapper", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("pycomm")
    gloo = dist.new_group(backend="gloo")
    (x, y), _ = split()
    batches = shard_batches(len(y), dist.get_rank(), dist.get_world_size(), args.batch, epoch=0)
    batches = batches[: WARMUP + args.steps]
    rows: dict[str, list[float]] = {"pycomm": [], "gloo": []}
    for _ in range(args.repeats):
        rows["pycomm"].append(samples_per_s(args.wrapper, dist.group.WORLD, x, y, batches))
        rows["gloo"].append(samples_per_s(args.wrapper, gloo, x, y, batches))
    write_result_and_close(pycomm.world(), args.out, rows)


if __name__ == "__main__":
    main()
