"""Worker of benchmarks/ddp_backend.py (mpirun, any number of ranks): DDP or FSDP2 (fully_shard on a 1-D
mesh) on the MNIST CNN or the char GPT (benchmarks/workers/ddp_tasks.py) with the process group on backend
"pycomm" and on a gloo group, alternating repeat by repeat; samples/s of the slowest rank.

    python benchmarks/workers/ddp_backend_run.py --model gpt --wrapper ddp --steps 60 --repeats 5 --out rows.json"""

from __future__ import annotations

import argparse
import gc
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm
from benchmarks.workers.ddp_tasks import DEFAULT_BATCH, MODELS, Task, task
from benchmarks.workers.rank0_result import write_result_and_close

WARMUP = 5


def wrapped(wrapper: str, model: torch.nn.Module, group: dist.ProcessGroup) -> torch.nn.Module:
    """`model` under DDP, or sharded by FSDP2 over a 1-D mesh of `group`."""
    if wrapper == "ddp":
        return DDP(model, process_group=group)
    fully_shard(model, mesh=DeviceMesh.from_group(group, "cpu"))
    return model


def samples_per_s(wrapper: str, group: dist.ProcessGroup, work: Task, batches: list[torch.Tensor]) -> float:
    model = wrapped(wrapper, work.make_model(), group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(idx: torch.Tensor) -> None:
        opt.zero_grad()
        work.loss(model, idx).backward()
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
    p.add_argument("--model", choices=MODELS, default="mnist")
    p.add_argument("--wrapper", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, help="samples per rank and step (default: the model's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("pycomm")
    gloo = dist.new_group(backend="gloo")
    work = task(args.model)
    batch = args.batch or DEFAULT_BATCH[args.model]
    batches = work.batches(dist.get_rank(), dist.get_world_size(), batch, WARMUP + args.steps)
    rows: dict[str, list[float]] = {"pycomm": [], "gloo": []}
    for _ in range(args.repeats):
        rows["pycomm"].append(samples_per_s(args.wrapper, dist.group.WORLD, work, batches))
        rows["gloo"].append(samples_per_s(args.wrapper, gloo, work, batches))
    write_result_and_close(pycomm.world(), args.out, rows)


if __name__ == "__main__":
    main()
