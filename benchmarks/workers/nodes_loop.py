"""The training loop that benchmarks/nodes.py's own-loop workers share (torch DDP/FSDP2, torchft, pycomm's DiLoCo
in the same bare loop) on one of benchmarks/nodes_problem.py's problems (cosine over the steps), each rank
taking the samples apps.train's data order gives it (apps/data/sharding.py, with apps.train's seed): every case
that trains across the ranks sees the same batches. Every `eval_every` steps and at the last the clock stops and the rank
scores its own model on the eval split; the first rank writes {"curve": [[step, seconds, eval loss]],
"train_s": seconds} and prints "done: STEPS steps in X.Xs" as apps.train does."""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch

from algorithms.schedules import CosineWithWarmup
from apps.data.sharding import ShardPlan
from benchmarks.nodes_problem import BATCH, PROBLEMS, Problem, mean_loss

Curve = list[tuple[int, float, float]]


@torch.no_grad()
def eval_loss(model: torch.nn.Module, data: object) -> float:
    model.eval()
    total, count = 0.0, 0
    for chunk in torch.arange(len(data)).split(500):  # type: ignore[arg-type]
        x, y = data.batch(chunk)[:2]  # type: ignore[attr-defined]
        total += float(mean_loss(model(x), y, reduction="sum"))
        count += y.numel()
    model.train()
    return total / count


def add_problem_options(ap: argparse.ArgumentParser) -> None:
    """Every worker's --problem and --seed (apps.train's train.seed: the model's initialisation, the data order)."""
    ap.add_argument("--problem", type=problem_arg, default="mnist-cnn")
    ap.add_argument("--seed", type=int, default=0)


def initial_model(args: argparse.Namespace) -> torch.nn.Module:
    """The problem's model as apps.train builds it: torch.manual_seed(train.seed), then the model, on every rank."""
    torch.manual_seed(args.seed)
    return args.problem.model()


def problem_arg(value: str) -> Problem:
    """A worker's --problem option."""
    if value not in PROBLEMS:
        raise argparse.ArgumentTypeError(f"unknown problem {value!r}; expected one of {', '.join(PROBLEMS)}")
    return PROBLEMS[value]


def train(
    problem: Problem,
    model: torch.nn.Module,
    opt: Any,
    steps: int,
    eval_every: int,
    rank: int,
    world: int,
    seed: int,
    before_eval: Callable[[], None] = lambda: None,
) -> tuple[Curve, float]:
    """`steps` steps of `problem` in `seed`'s data order with `opt` (an inner optimizer a wrapper hooks, or a
    CommOptimizer) on rank `rank` of `world`: (curve, training seconds). `before_eval`: run before each
    evaluation, the clock stopped (e.g. a barrier)."""
    sched = CosineWithWarmup(opt, steps)
    splits = problem.splits()
    plan = ShardPlan(len(splits.train), rank, world, BATCH, seed=seed)
    batches = (b for epoch in itertools.count() for b in plan.batches(epoch, 0))
    curve, clock = [], 0.0
    for step in range(1, steps + 1):
        start = time.perf_counter()
        x, y = splits.train.batch(next(batches))[:2]
        opt.zero_grad()
        mean_loss(model(x), y).backward()
        opt.step()
        sched.step()
        clock += time.perf_counter() - start
        if step % eval_every == 0 or step == steps:
            before_eval()
            curve.append((step, clock, eval_loss(model, splits.eval)))
    return curve, clock


def write(out: Path, steps: int, curve: Curve, clock: float) -> None:
    """The first rank's result file and apps.train's closing line."""
    out.write_text(json.dumps({"curve": curve, "train_s": clock}))
    print(f"done: {steps} steps in {clock:.1f}s", flush=True)
