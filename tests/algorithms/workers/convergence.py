"""Train the tiny CNN on MNIST (8,000 / 2,000) with each algorithm on real ranks until every rank's
model reaches the target eval accuracy, within a bounded number of epochs.
Usage: convergence OUT_DIR [CASE ...]"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

import algorithms
import pycomm
from benchmarks.convergence_cases import BATCH, CASES, MAX_EPOCHS, TARGET
from benchmarks.mnist_cnn import TinyCNN, accuracy, shard_batches, split
from tests.algorithms.workers.common import run_cases, world


def run(comm: Any, name: str, data: Any) -> dict[str, Any]:
    (xt, yt), (xe, ye) = data
    algorithm, options, make = CASES[name]
    torch.manual_seed(1234 + comm.rank)  # different initial models: wrapping broadcasts rank 0's
    model = TinyCNN()
    inner = make(model.parameters())
    opt = algorithms.CommOptimizer(inner, algorithm=algorithm, comm=comm, model=model, **options)
    sched = algorithms.CosineWithWarmup(
        opt,
        total_steps=MAX_EPOCHS * len(shard_batches(len(yt), 0, comm.size, BATCH, 0)),
        warmup_steps=10,
        baseline_lr=inner.param_groups[0]["lr"] / 10,
    )
    steps, t0, history = 0, time.perf_counter(), []
    for epoch in range(MAX_EPOCHS):
        for idx in shard_batches(len(yt), comm.rank, comm.size, BATCH, epoch):
            opt.zero_grad()
            loss = F.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step(loss=loss)
            sched.step()
            steps += 1
        if hasattr(opt, "average_now"):
            opt.average_now()
        acc = torch.tensor([accuracy(model, xe, ye)], dtype=torch.float64)
        comm.allreduce(acc, op=pycomm.MIN)
        history.append(float(acc))
        if acc.item() >= TARGET:
            break
    return {
        "ok": history[-1] >= TARGET,
        "accuracy": history[-1],
        "history": history,
        "steps": steps,
        "seconds": time.perf_counter() - t0,
        "comm_stats": opt.comm_stats(),
    }


def main() -> None:
    comm = world()
    data = split()
    run_cases(comm, ((name, lambda name=name: run(comm, name, data)) for name in sys.argv[2:] or CASES))


if __name__ == "__main__":
    main()
