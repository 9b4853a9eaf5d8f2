"""Where LAP-SGD's accuracy goes, measured: LAP's worker update rule (the real
algorithms.lap.worker.HogwildWorker, each worker with its own momentum) simulated in one process, so the
staleness of every update is fixed instead of left to the scheduler: the gradient of node minibatch k is
computed on the model with the updates of minibatches < k - s applied, then applied after them. Same
problem as benchmarks.algorithms (TinyCNN, MNIST's 8,000 training images, batch 64, cosine schedule with
warm-up over 3 passes), one rank, no averaging, `--passes` passes. Workers take minibatches in turn, and
a worker applies its own update before its next read, so staleness s needs s + 1 workers. Cases: one
worker (no asynchrony); P = 2 workers with no staleness (only the per-worker momentum and lr / P
differ); P = 2 at s = 1, about the mean staleness benchmarks.algorithms measures for its real workers
(LapResult.mean_staleness 0.9, a spread of 0, 1, 2, ...); P = 3 at s = 2; and s = 1 with lowered
momentum, where asynchrony adds the implicit momentum s / (1 + s) (Mitliagkas et al. 2016).
Usage: python -m benchmarks.hogwild_staleness [--passes 2] [--seeds 4]."""

from __future__ import annotations

import argparse
import statistics
from collections import deque
from typing import Any

import torch

from algorithms.lap.shared import MomentumState, SharedCounters
from algorithms.lap.worker import GroupHyper, HogwildWorker, WorkerSpec
from algorithms.ps.stale_steps import compensated_momentum
from algorithms.schedules import CosineWithWarmup
from benchmarks import harness
from benchmarks.mnist_cnn import TinyCNN, accuracy, split

BATCH, LR, MOMENTUM, WARMUP, SCHEDULE_PASSES = 64, 0.05, 0.9, 10, 3

# (label, workers P, staleness s, lr per worker, momentum per worker)
CASES: list[tuple[str, int, int, float, float]] = [
    ("1 worker", 1, 0, LR, MOMENTUM),
    ("2 workers, s=0", 2, 0, LR / 2, MOMENTUM),
    ("2 workers, s=1", 2, 1, LR / 2, MOMENTUM),
    ("3 workers, s=2", 3, 2, LR / 3, MOMENTUM),
    ("2 workers, s=1, m=0.8", 2, 1, 0.7 * LR, 0.8),
    ("2 workers, s=1, compensated m", 2, 1, LR / 2, compensated_momentum(MOMENTUM, 1.0)),
    ("2 workers, s=1, lr x2, m=0.6", 2, 1, LR, 0.6),
]


def workers_for(model: torch.nn.Module, P: int, momentum: float) -> list[HogwildWorker]:
    params = list(model.parameters())
    counters = SharedCounters.create(torch.multiprocessing.get_context("fork"), P, 1, 0, 0)
    state = MomentumState.zeros(params, P)
    return [
        HogwildWorker(
            WorkerSpec(
                worker=w,
                model=model,
                loss_fn=torch.nn.functional.cross_entropy,
                dataset=None,
                shard=None,
                batch_size=BATCH,
                seed=w,
                device=torch.device("cpu"),
                groups=[GroupHyper(momentum, 0.0, 0.0, False)],
                group_of=[0] * len(params),
                momentum=state,
                counters=counters,
                block=None,
                prepassm_steps=0,
                threads=1,
                errors=None,
            )
        )
        for w in range(P)
    ]


def batch_order(n: int, steps: int, seed: int) -> list[torch.Tensor]:
    """Node minibatch k's indices: batch k of a fresh permutation per pass."""
    gen, per_pass = torch.Generator().manual_seed(1000 + seed), n // BATCH
    order: list[torch.Tensor] = []
    while len(order) < steps:
        perm = torch.randperm(n, generator=gen)
        order += [perm[i * BATCH : (i + 1) * BATCH] for i in range(per_pass)]
    return order[:steps]


Data = tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # tests' split()


def train(P: int, staleness: int, lr: float, momentum: float, steps: int, seed: int, data: Data) -> torch.nn.Module:
    """TinyCNN after `steps` node minibatches; minibatch k is worker k % P's, its gradient computed on
    the model with minibatches < k - staleness applied (staleness < P: a worker's own update is applied
    before its next read)."""
    if not 0 <= staleness < P:
        raise ValueError(f"staleness must be in [0, P={P}), got {staleness}")
    (xt, yt), _ = data
    torch.manual_seed(seed)
    model = TinyCNN()
    workers = workers_for(model, P, momentum)
    sched = CosineWithWarmup(
        torch.optim.SGD(model.parameters(), lr=lr),
        total_steps=SCHEDULE_PASSES * (len(yt) // BATCH),
        warmup_steps=WARMUP,
        baseline_lr=lr / 10,
    )
    pending: deque[tuple[HogwildWorker, range, tuple[torch.Tensor, ...], float]] = deque()  # computed, not applied
    for k, idx in enumerate(batch_order(len(yt), steps, seed)):
        worker = workers[k % P]
        _, chosen, grads = worker.gradients((xt[idx], yt[idx]), k)
        pending.append((worker, chosen, grads, sched.lr_at(k, lr)))
        while len(pending) > staleness or (k == steps - 1 and pending):
            w, c, g, rate = pending.popleft()
            w.apply(c, g, [rate])
    return model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    data = split()
    rows: list[dict[str, Any]] = []
    for label, P, s, lr, m in CASES:
        steps = args.passes * (len(data[0][1]) // BATCH)
        accs = [accuracy(train(P, s, lr, m, steps, seed, data), *data[1]) for seed in range(args.seeds)]
        rows.append(
            {
                "case": label,
                "workers": P,
                "staleness": s,
                "lr": lr,
                "momentum": m,
                "accuracy": statistics.mean(accs),
                "accuracy_min": min(accs),
                "accuracy_max": max(accs),
                "accuracies": accs,
            }
        )
        print(
            harness.table([rows[-1]], ["case", "lr", "momentum", "accuracy", "accuracy_min", "accuracy_max"]),
            flush=True,
        )
    print(harness.table(rows, ["case", "lr", "momentum", "accuracy", "accuracy_min", "accuracy_max"]))

    def plot(ax: Any) -> None:
        means = [r["accuracy"] for r in rows]
        ax.bar(
            range(len(rows)),
            means,
            yerr=[
                [m - r["accuracy_min"] for m, r in zip(means, rows)],
                [r["accuracy_max"] - m for m, r in zip(means, rows)],
            ],
            capsize=4,
        )
        ax.set_xticks(range(len(rows)), [r["case"] for r in rows], rotation=20, ha="right", fontsize=8)
        ax.set_ylim(min(r["accuracy_min"] for r in rows) - 0.01, 1.0)
        ax.set_ylabel(f"held-out accuracy after {args.passes} passes (mean, min-max of {args.seeds} seeds)")
        ax.set_title("LAP's update rule at fixed staleness (TinyCNN, MNIST)", fontsize=9)

    harness.save("hogwild_staleness", {"passes": args.passes, "seeds": args.seeds, "batch": BATCH, "runs": rows}, plot)


if __name__ == "__main__":
    main()
