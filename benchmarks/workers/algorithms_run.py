"""One rank of benchmarks/algorithms.py: train the tiny MNIST CNN with torch DDP (gloo) and with every
algorithm, 2 x 64 samples per step, timing the training steps only (evaluations paused out).
Usage: algorithms_run OUT_JSON EPOCHS CASE ..."""
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

EVALS_PER_EPOCH = 4


def make_ddp(comm: Any) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}",
                                rank=comm.rank, world_size=comm.size)
    model = torch.nn.parallel.DistributedDataParallel(TinyCNN())
    opt = torch.optim.SGD(model.parameters(), **SGD)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return model, opt, lambda steps: grad_bytes * steps     # DDP all-reduces every gradient every step


def make_algorithm(comm: Any, name: str) -> tuple[torch.nn.Module, Any, Any]:
    algorithm, options, make = CASES[name]
    model = TinyCNN()
    opt = algorithms.CommOptimizer(make(model.parameters()), algorithm=algorithm, comm=comm, model=model, **options)
    return model, opt, lambda steps: opt.comm_stats()["bytes"]


def run(comm: Any, name: str, data: Any, epochs: int) -> dict[str, Any]:
    (xt, yt), (xe, ye) = data
    torch.manual_seed(1234 + comm.rank)
    model, opt, bytes_after = make_ddp(comm) if name == "ddp" else make_algorithm(comm, name)
    per_epoch = len(shard_batches(len(yt), 0, comm.size, BATCH, 0))
    sched = algorithms.CosineWithWarmup(opt, total_steps=3 * per_epoch, warmup_steps=10,
                                        baseline_lr=opt.param_groups[0]["lr"] / 10)
    eval_every = max(per_epoch // EVALS_PER_EPOCH, 1)
    steps, train_s, curve, time_to_target = 0, 0.0, [], None
    for epoch in range(epochs):
        t0 = time.perf_counter()
        for idx in shard_batches(len(yt), comm.rank, comm.size, BATCH, epoch):
            opt.zero_grad()
            loss = F.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step(loss=loss) if name != "ddp" else opt.step()
            sched.step()
            steps += 1
            if steps % eval_every == 0:
                train_s += time.perf_counter() - t0
                acc = mean_over_ranks(comm, accuracy(model, xe, ye))
                curve.append({"step": steps, "bytes": bytes_after(steps), "seconds": train_s, "accuracy": acc})
                if time_to_target is None and acc >= TARGET:
                    time_to_target = train_s
                t0 = time.perf_counter()
        train_s += time.perf_counter() - t0
    if hasattr(opt, "average_now"):
        opt.average_now()
    final = mean_over_ranks(comm, accuracy(model, xe, ye))
    return {"samples_per_s": steps * BATCH * comm.size / train_s, "bytes_per_step": bytes_after(steps) / steps,
            "time_to_target_s": time_to_target, "final_accuracy": final, "steps": steps, "train_seconds": train_s,
            "curve": curve}


def mean_over_ranks(comm: Any, value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    comm.allreduce(t, op=pycomm.AVG)
    return float(t)


def main() -> None:
    out, epochs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(1)
    comm = pycomm.init()
    data = split()
    results = {}
    for name in names:
        results[name] = run(comm, name, data, epochs)
        if comm.rank == 0:
            print(f"{name}: {results[name]['samples_per_s']:.0f} samples/s, final {results[name]['final_accuracy']:.4f}",
                  flush=True)
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
