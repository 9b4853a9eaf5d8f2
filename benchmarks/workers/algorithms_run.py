"""One rank of benchmarks/algorithms.py: train the tiny MNIST CNN with torch DDP (gloo) and with every
algorithm, 2 x 64 samples per step. The cases train interleaved, a segment of steps each in turn, so
that the load of a shared machine drifting over time hits every case alike; only training steps are
timed (evaluations between segments are not).

lapsgd / lppsgd train through their own loop (opt.train, P = 2 Hogwild worker processes per rank;
lapsgd-1w: P = 1), so
they interleave too: each of their segments is one train() call over the segment's number of node
minibatches. The rank's workers are started by the first call and sleep between calls; later calls only
wake them. That start-up (LapResult.startup_seconds, paid once per optimizer, as DDP's process-group
set-up is paid before its first step) is not training time: it is taken out of the timed segment and
reported apart (startup_seconds). Between segments each rank's own model is evaluated, as
for the other local-update algorithms; the last segment ends with LAP's synchronous final average. LAP
workers draw their batches from the rank's strided shard of the same 8,000 training images (items r,
r+2, ...) rather than from shard_batches. Usage: algorithms_run OUT_JSON EPOCHS CASE ..."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import algorithms
import pycomm
from benchmarks.convergence_cases import BATCH, CASES, SGD, TARGET
from benchmarks.mnist_cnn import TinyCNN, accuracy, shard_batches, split
from benchmarks.workers.rank0_result import write_result_and_close

# case -> (algorithm, options): those of the LAP/LPP MNIST test (tests/algorithms/workers/lap_mnist.py), 2
# workers per rank; and lapsgd with 1 worker per rank (this machine's one core per rank), where no update
# is stale (benchmarks/hogwild_staleness.py: 2 workers' staleness, not their speed, costs the accuracy)
LAP_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lapsgd": ("lapsgd", {"num_processes": 2, "averaging_freq": 4, "pre_post_steps": 20}),
    "lppsgd": ("lppsgd", {"num_processes": 2, "averaging_freq": 4, "pre_post_steps": 20, "prepassm_steps": 100}),
    "lapsgd-1w": ("lapsgd", {"num_processes": 1, "averaging_freq": 4, "pre_post_steps": 20}),
}

SEGMENTS_PER_EPOCH = 4


class Run:
    """One case's model, optimizer, schedule and measurements."""

    def __init__(self, comm: Any, name: str, steps_per_epoch: int, epochs: int) -> None:
        self.comm, self.name = comm, name
        torch.manual_seed(1234 + comm.rank)
        self.model = TinyCNN()
        self.opt: Any = self.make_optimizer()
        self.total_steps = epochs * steps_per_epoch
        self.sched = algorithms.CosineWithWarmup(
            self.opt, total_steps=3 * steps_per_epoch, warmup_steps=10, baseline_lr=self.opt.param_groups[0]["lr"] / 10
        )
        self.grad_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.steps, self.seconds, self.curve, self.time_to_target = 0, 0.0, [], None
        self.startup_seconds = 0.0  # lapsgd/lppsgd: starting the worker pool, not counted in seconds
        self.stale_updates = 0.0  # lapsgd/lppsgd: summed staleness of their updates (LapResult)

    def bytes(self) -> int:
        if self.name == "ddp":  # DDP all-reduces every gradient every step
            return self.grad_bytes * self.steps
        return self.opt.comm_stats()["bytes"]

    def make_optimizer(self) -> Any:
        if self.name == "ddp":
            if not dist.is_initialized():
                dist.init_process_group(
                    "gloo",
                    init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}",
                    rank=self.comm.rank,
                    world_size=self.comm.size,
                )
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)
            return torch.optim.SGD(self.model.parameters(), **SGD)
        algorithm, options, make = CASES[self.name]
        return algorithms.CommOptimizer(
            make(self.model.parameters()), algorithm=algorithm, comm=self.comm, model=self.model, **options
        )

    def train(self, batches: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
        t0 = time.perf_counter()
        startup = self.train_steps(batches, x, y)
        self.seconds += time.perf_counter() - t0 - startup
        self.startup_seconds += startup

    def train_steps(self, batches: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> float:
        """Train on `batches`; returns the seconds of it that were start-up rather than training."""
        for idx in batches:
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x[idx]), y[idx])
            loss.backward()
            self.opt.step() if self.name == "ddp" else self.opt.step(loss=loss)
            self.sched.step()
            self.steps += 1
        return 0.0

    def finish(self) -> None:
        """Bring the ranks' models together before the final evaluation, where the algorithm does that."""
        if hasattr(self.opt, "average_now"):
            self.opt.average_now()

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> float:
        acc = mean_over_ranks(self.comm, accuracy(self.model, x, y))
        self.curve.append({"step": self.steps, "bytes": self.bytes(), "seconds": self.seconds, "accuracy": acc})
        if self.time_to_target is None and acc >= TARGET:
            self.time_to_target = self.seconds
        return acc

    def result(self, final: float) -> dict[str, Any]:
        return {
            "samples_per_s": self.steps * BATCH * self.comm.size / self.seconds,
            "bytes_per_step": self.bytes() / self.steps,
            "time_to_target_s": self.time_to_target,
            "final_accuracy": final,
            "steps": self.steps,
            "train_seconds": self.seconds,
            "startup_seconds": self.startup_seconds,
            "mean_staleness": self.stale_updates / self.steps,
            "curve": self.curve,
        }


class LapRun(Run):
    """lapsgd / lppsgd: a segment is one opt.train() call (the rank's P workers train it Hogwild), with the
    cosine schedule moved per node minibatch by LAP's main process."""

    def make_optimizer(self) -> Any:
        # P Hogwild workers all apply their steps to the one model, so the node moves P times a worker's
        # step: lr / P keeps the node's step size that of the other cases (at lr it diverges early).
        algorithm, options = LAP_CASES[self.name]
        sgd = {**SGD, "lr": SGD["lr"] / options["num_processes"]}
        return algorithms.CommOptimizer(
            torch.optim.SGD(self.model.parameters(), **sgd), algorithm=algorithm, comm=self.comm, **options
        )

    def train_steps(self, batches: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> float:
        last = self.steps + len(batches) >= self.total_steps
        if getattr(self, "dataset", None) is None:  # one dataset object: later segments reuse the worker pool
            self.dataset = TensorDataset(x, y)
        result = self.opt.train(
            self.model,
            F.cross_entropy,
            self.dataset,
            steps=len(batches),
            batch_size=BATCH,
            scheduler=self.sched,
            scheduler_interval="step",
            final_average=last,
        )
        self.steps = self.opt.node_steps  # finish() has nothing to do: the last call averaged
        self.stale_updates += result.mean_staleness * result.steps
        return result.startup_seconds


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
    runs = [(LapRun if name in LAP_CASES else Run)(comm, name, per_epoch, epochs) for name in names]
    segment = -(-per_epoch // SEGMENTS_PER_EPOCH)
    for epoch in range(epochs):
        batches = shard_batches(len(yt), comm.rank, comm.size, BATCH, epoch)
        for start in range(0, len(batches), segment):
            for i in range(len(runs)):  # rotate who goes first, so no case always follows another
                runs[(i + start // segment) % len(runs)].train(batches[start : start + segment], xt, yt)
            for run in runs:
                run.evaluate(xe, ye)
    results = {}
    for run in runs:
        run.finish()
        results[run.name] = run.result(mean_over_ranks(comm, accuracy(run.model, xe, ye)))
    runs = run = None  # their DDP models go before the group is destroyed (rank0_result)
    if comm.rank == 0:
        for name, r in results.items():
            print(f"{name}: {r['samples_per_s']:.0f} samples/s, final {r['final_accuracy']:.4f}", flush=True)
    write_result_and_close(comm, out, results)


if __name__ == "__main__":
    main()
