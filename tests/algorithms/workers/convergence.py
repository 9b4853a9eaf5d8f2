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
from tests.algorithms.mnist import TinyCNN, accuracy, shard_batches, split
from tests.algorithms.workers.common import run_cases, world

TARGET, MAX_EPOCHS, BATCH = 0.95, 3, 64
SGD = {"lr": 0.05, "momentum": 0.9}

# case -> (algorithm, options, inner optimizer factory, lr schedule)
CASES: dict[str, tuple[str, dict[str, Any], Any]] = {
    "mbsgd": ("mbsgd", {}, lambda p: torch.optim.SGD(p, **SGD)),
    "mbsgd-lars": ("mbsgd", {}, lambda p: algorithms.LARS(p, lr=2.0, momentum=0.9, trust_coefficient=0.01)),
    "plsgd": ("plsgd", {"averaging_freq": 8, "pre_post_steps": 16}, lambda p: torch.optim.SGD(p, **SGD)),
    "qsr-sgd": ("qsr", {"h_base": 4, "alpha": 0.1, "total_steps": 186}, lambda p: torch.optim.SGD(p, **SGD)),
    "qsr-adamw": ("qsr", {"h_base": 4, "alpha": 0.008, "avg_m": True, "avg_v": True, "total_steps": 186},
                  lambda p: torch.optim.AdamW(p, lr=4e-3, weight_decay=1e-4)),
    "easgd": ("easgd", {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
              lambda p: torch.optim.SGD(p, **SGD)),
    "easgd+": ("easgd+", {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
               lambda p: torch.optim.SGD(p, **SGD)),
    "lsgd": ("lsgd", {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
             lambda p: torch.optim.SGD(p, **SGD)),
    "lsgd+": ("lsgd+", {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
              lambda p: torch.optim.SGD(p, **SGD)),
}


def run(comm: Any, name: str, data: Any) -> dict[str, Any]:
    (xt, yt), (xe, ye) = data
    algorithm, options, make = CASES[name]
    torch.manual_seed(1234 + comm.rank)      # different initial models: wrapping broadcasts rank 0's
    model = TinyCNN()
    inner = make(model.parameters())
    opt = algorithms.CommOptimizer(inner, algorithm=algorithm, comm=comm, model=model, **options)
    sched = algorithms.CosineWithWarmup(opt, total_steps=MAX_EPOCHS * len(shard_batches(len(yt), 0, comm.size, BATCH, 0)),
                                        warmup_steps=10, baseline_lr=inner.param_groups[0]["lr"] / 10)
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
    return {"ok": history[-1] >= TARGET, "accuracy": history[-1], "history": history, "steps": steps,
            "seconds": time.perf_counter() - t0, "comm_stats": opt.comm_stats()}


def main() -> None:
    comm = world()
    data = split()
    run_cases(comm, ((name, lambda name=name: run(comm, name, data)) for name in sys.argv[2:] or CASES))


if __name__ == "__main__":
    main()
