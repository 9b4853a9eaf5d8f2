"""One rank of benchmarks/algorithms.py: train the tiny MNIST CNN with torch DDP (gloo) and with every
algorithm, 2 x 64 samples per step. The cases train interleaved, a segment of steps each in turn, so
that the load of a shared machine drifting over time hits every case alike; only training steps are
timed (evaluations between segments are not). Usage: algorithms_run OUT_JSON EPOCHS CASE ..."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

import algorithms
import pycomm
from tests.algorithms.mnist import TinyCNN, accuracy, shard_batches, split
from tests.algorithms.workers.convergence import BATCH, CASES, SGD, TARGET

SEGMENTS_PER_EPOCH = 4


class Run:
    """One case's model, optimizer, schedule and measurements."""

    def __init__(self, comm: Any, name: str, steps_per_epoch: int, epochs: int) -> None:
        self.comm, self.name = comm, name
        torch.manual_seed(1234 + comm.rank)
        self.model = TinyCNN()
        if name == "ddp":
            if not dist.is_initialized():
                dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}",
                                        rank=comm.rank, world_size=comm.size)
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)
            self.opt: Any = torch.optim.SGD(self.model.parameters(), **SGD)
        else:
            algorithm, options, make = CASES[name]
            self.opt = algorithms.CommOptimizer(make(self.model.parameters()), algorithm=algorithm, comm=comm,
                                                model=self.model, **options)
        self.sched = algorithms.CosineWithWarmup(self.opt, total_steps=3 * steps_per_epoch, warmup_steps=10,
                                                 baseline_lr=self.opt.param_groups[0]["lr"] / 10)
        self.grad_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.steps, self.seconds, self.curve, self.time_to_target = 0, 0.0, [], None

    def bytes(self) -> int:
        if self.name == "ddp":   # DDP all-reduces every gradient every step
            return self.grad_bytes * self.steps
        return self.opt.comm_stats()["bytes"]

    def train(self, batches: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
        t0 = time.perf_counter()
        for idx in batches:
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x[idx]), y[idx])
            loss.backward()
            self.opt.step() if self.name == "ddp" else self.opt.step(loss=loss)
            self.sched.step()
            self.steps += 1
        self.seconds += time.perf_counter() - t0

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> float:
        acc = mean_over_ranks(self.comm, accuracy(self.model, x, y))
        self.curve.append({"step": self.steps, "bytes": self.bytes(), "seconds": self.seconds, "accuracy": acc})
        if self.time_to_target is None and acc >= TARGET:
            self.time_to_target = self.seconds
        return acc

    def result(self, final: float) -> dict[str, Any]:
        return {"samples_per_s": self.steps * BATCH * self.comm.size / self.seconds,
                "bytes_per_step": self.bytes() / self.steps, "time_to_target_s": self.time_to_target,
                "final_accuracy": final, "steps": self.steps, "train_seconds": self.seconds, "curve": self.curve}


def mean_over_ranks(comm: Any, value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    comm.allreduce(t, op=pycomm.AVG)
    return float(t)


def main() -> None:
    out, epochs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(1)
    comm = pycomm.init()
    (xt, yt), (xe, ye) = split()
    per_epoch = len(shard_batches(len(yt), 0, comm.size, BATCH, 0))
    runs = [Run(comm, name, per_epoch, epochs) for name in names]
    segment = -(-per_epoch // SEGMENTS_PER_EPOCH)
    for epoch in range(epochs):
        batches = shard_batches(len(yt), comm.rank, comm.size, BATCH, epoch)
        for start in range(0, len(batches), segment):
            for i in range(len(runs)):   # rotate who goes first, so no case always follows another
                runs[(i + start // segment) % len(runs)].train(batches[start:start + segment], xt, yt)
            for run in runs:
                run.evaluate(xe, ye)
    results = {}
    for run in runs:
        if hasattr(run.opt, "average_now"):
            run.opt.average_now()
        results[run.name] = run.result(mean_over_ranks(comm, accuracy(run.model, xe, ye)))
    if comm.rank == 0:
        for name, r in results.items():
            print(f"{name}: {r['samples_per_s']:.0f} samples/s, final {r['final_accuracy']:.4f}", flush=True)
        with open(out, "w") as f:
            json.dump(results, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
