"""One rank of benchmarks/nodes.py's DDP case: apps.train's embedded default problem (SmallCNN on the
embedded MNIST, batch 32 per rank, SGD lr 0.05 momentum 0.9) under torch DDP over gloo, for STEPS steps,
started by torchrun (one per node). Rank 0 prints "done: STEPS steps in X.Xs" as apps.train does.
Usage: nodes_ddp STEPS"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from apps.data import idx
from apps.models import SmallCNN

BATCH = 32


def main() -> None:
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(SmallCNN())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train = idx.load().train
    mine = torch.arange(rank, len(train), size)          # this rank's strided shard
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        at = (step * BATCH) % (len(mine) - BATCH)
        x, y = train.batch(mine[at:at + BATCH])[:2]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    dist.barrier()
    if rank == 0:
        print(f"done: {steps} steps in {time.perf_counter() - start:.1f}s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
