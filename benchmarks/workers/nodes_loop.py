"""The training loop that benchmarks/nodes.py's own-loop workers share (torch DDP/FSDP2, torchft, pycomm's DiLoCo
in the same bare loop): apps.train's embedded default problem (SmallCNN on the embedded MNIST, batch 32 per
rank, SGD lr 0.05 momentum 0.9, cosine over the steps), each rank walking its strided shard of the training
split in order. Every `eval_every` steps and at the last the clock stops and the rank scores its own model on
the eval split; the first rank writes {"curve": [[step, seconds, eval loss]], "train_s": seconds} and prints
"done: STEPS steps in X.Xs" as apps.train does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from algorithms.schedules import CosineWithWarmup
from apps.data import idx

BATCH = 32
Curve = list[tuple[int, float, float]]


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


def inner_sgd(model: torch.nn.Module) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(
    model: torch.nn.Module,
    opt: Any,
    steps: int,
    eval_every: int,
    rank: int,
    world: int,
    before_eval: Callable[[], None] = lambda: None,
) -> tuple[Curve, float]:
    """`steps` steps of `opt` (an inner optimizer a wrapper hooks, or a CommOptimizer) on rank `rank` of `world`:
    (curve, training seconds). `before_eval`: run before each evaluation, the clock stopped (e.g. a barrier)."""
    sched = CosineWithWarmup(opt, steps)
    splits = idx.load()
    mine = torch.arange(rank, len(splits.train), world)  # this rank's strided shard
    curve, clock = [], 0.0
    for step in range(1, steps + 1):
        start = time.perf_counter()
        at = ((step - 1) * BATCH) % (len(mine) - BATCH)
        x, y = splits.train.batch(mine[at : at + BATCH])[:2]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
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
