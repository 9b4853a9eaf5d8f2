"""A user's own training script, as a new user writes it: the pytorch/examples MNIST CNN with AdamW, a
OneCycle schedule, gradient clipping and bf16 autocast, data from a DistributedSampler + DataLoader, on
2 ranks started by the user's own `mpirun -n 2 python ...` (or torchrun). `--backend pycomm` wraps the
optimizer in pycomm's mbsgd (docs/port_ddp.md), `--backend ddp` is torch DDP on gloo. Nothing in it is
tuned for pycomm: no thread counts set, no environment variables. benchmarks/algorithms.py --user-script
launches it (idle and beside a busy process per core) and compares the backends.

    mpirun -n 2 python -m benchmarks.workers.user_script --backend pycomm --out result.json
    MASTER_PORT=29511 mpirun -n 2 -x MASTER_PORT python -m benchmarks.workers.user_script --backend ddp

Rank 0 writes samples/s over the timed steps (all but the first WARMUP_STEPS, which carry the lazy set-up
of both backends), the final training loss (mean over ranks of the last 20 steps) and the steps' count."""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.mnist_cnn import split

WARMUP_STEPS = 5


class Net(nn.Module):  # pytorch/examples mnist/main.py
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = self.dropout1(x)
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def setup(backend: str, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, int, nn.Module, object, object]:
    """(rank, size, the model to call, the optimizer to step, a sampler factory) for the backend."""
    if backend == "pycomm":
        import algorithms
        import pycomm

        comm = pycomm.init()
        opt = algorithms.CommOptimizer(opt, algorithm="mbsgd", model=model)
        return comm.rank, comm.size, model, opt, lambda ds: pycomm.DistributedSampler(ds, seed=0, drop_last=True)
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler

    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0)))
    size = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", 1)))
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "29500")
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size)
    return (
        rank,
        size,
        nn.parallel.DistributedDataParallel(model),
        opt,
        lambda ds: DistributedSampler(ds, seed=0, drop_last=True),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("pycomm", "ddp"), required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (smoke runs)")
    ap.add_argument("--out", help="rank 0 writes its figures here (JSON)")
    args = ap.parse_args(argv)

    torch.manual_seed(1)
    (x, y), _ = split()
    dataset = TensorDataset(x, y)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    rank, size, model, opt, make_sampler = setup(args.backend, model, opt)
    sampler = make_sampler(dataset)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, epochs=args.epochs, steps_per_epoch=len(loader))
    model.train()
    steps, losses, t0 = 0, [], 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for data, target in loader:
            if steps == args.max_steps:
                break
            if steps == WARMUP_STEPS:
                t0 = time.perf_counter()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.nll_loss(model(data), target)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            steps += 1
    seconds = time.perf_counter() - t0
    final = torch.tensor([sum(losses[-20:]) / len(losses[-20:])])
    if args.backend == "pycomm":
        import pycomm

        pycomm.world().allreduce(final, op=pycomm.AVG)
    else:
        import torch.distributed as dist

        dist.all_reduce(final)
        final /= size
        # the DDP model goes before the group, or a rank can hang at exit (why: workers/rank0_result.py)
        del model
        gc.collect()  # in case a reference cycle holds it
        dist.destroy_process_group()
    timed = steps - WARMUP_STEPS
    if rank == 0:
        result = {
            "backend": args.backend,
            "samples_per_s": timed * args.batch_size * size / seconds,
            "seconds": seconds,
            "steps": steps,
            "final_loss": float(final),
            "ranks": size,
        }
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f)


if __name__ == "__main__":
    main()
