"""One rank of benchmarks/nodes.py's torch peers: apps.train's embedded default problem (SmallCNN on the
embedded MNIST, batch 32 per rank, SGD lr 0.05 momentum 0.9, cosine over STEPS) under torch DDP over gloo,
or with --fsdp2 FSDP2 as HSDP on a 2-D DeviceMesh (replicas across the nodes, shards within a node), started
by torchrun (one per node). Every EVAL_EVERY steps and at the last, every rank scores the eval split (the
clock stopped: evaluation is no part of the method); rank 0 writes {"curve": [[step, seconds, eval loss]],
"train_s": seconds} to OUT and prints "done: STEPS steps in X.Xs" as apps.train does.
Usage: nodes_ddp STEPS EVAL_EVERY OUT [--fsdp2]"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from algorithms.schedules import CosineWithWarmup
from apps.data import idx
from apps.models import SmallCNN

BATCH = 32


@torch.no_grad()
def eval_loss(model: torch.nn.Module, data: object) -> float:
    model.eval()
    total, count = 0.0, 0
    for chunk in torch.arange(len(data)).split(500):  # type: ignore[arg-type]
        x, y = data.batch(chunk)[:2]  # type: ignore[attr-defined]
        total += float(F.cross_entropy(model(x), y, reduction="sum"))
        count += len(chunk)
    model.train()
    return total / count


def wrap(model: torch.nn.Module, fsdp2: bool) -> torch.nn.Module:
    if not fsdp2:
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    local = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (dist.get_world_size() // local, local), mesh_dim_names=("replicate", "shard"))
    return fully_shard(model, mesh=mesh)  # a 2-D mesh: replicate over dim 0, shard over dim 1 (HSDP)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("eval_every", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--fsdp2", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = wrap(SmallCNN(), args.fsdp2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = CosineWithWarmup(opt, args.steps)
    splits = idx.load()
    mine = torch.arange(rank, len(splits.train), size)  # this rank's strided shard
    curve, clock = [], 0.0
    dist.barrier()
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        at = ((step - 1) * BATCH) % (len(mine) - BATCH)
        x, y = splits.train.batch(mine[at : at + BATCH])[:2]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        clock += time.perf_counter() - start
        if step % args.eval_every == 0 or step == args.steps:
            dist.barrier()  # the step is over on every rank before the clock stops
            curve.append((step, clock, eval_loss(model, splits.eval)))
    if rank == 0:
        args.out.write_text(json.dumps({"curve": curve, "train_s": clock}))
        print(f"done: {args.steps} steps in {clock:.1f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
