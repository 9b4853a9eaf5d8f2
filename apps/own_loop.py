"""The loop for algorithms that train in a loop of their own (traits.OWN_LOOP: e.g. P Hogwild worker
processes per rank) through the algorithm's `opt.train(...)`: the app runs it in chunks that end where
an evaluation, a checkpoint or a preemption check is due, and averages at every chunk's end (all ranks
then hold one model).
Hogwild runs are not bit-reproducible: a resumed run continues the same schedule and state."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from apps.run import Run


def loss_fn_for(kind: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if kind == "classify":
        return F.cross_entropy
    if kind == "lm":
        return _lm_loss
    raise ValueError(
        f"algorithms that train in their own loop need a model with targets (classification or "
        f"language model), not {kind!r}"
    )


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:  # module level: picklable for spawn
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train_own_loop(run: Run) -> bool:
    """Train to the end or to a preemption; True when preempted (checkpoint saved)."""
    cfg, state, budget = run.cfg, run.state, run.budget
    loss_fn = loss_fn_for(run.kind)
    cadence = [budget.eval_every, budget.checkpoint_every, cfg.train.preempt_check_every * cfg.train.log_every]
    while state.step < budget.total_steps:
        next_stop = min(min((state.step // c + 1) * c for c in cadence), budget.total_steps)
        tic = time.time()
        reports: list[dict[str, Any]] = []
        # apps' schedules are written in optimizer steps (= node minibatches), so "step" gives LAP's rule
        # lr(minibatch k) = schedule(k / steps_per_epoch) with the schedule in epochs
        result = run.opt.train(
            run.model,
            loss_fn,
            run.splits.train,
            steps=next_stop - state.step,
            batch_size=cfg.data.batch_size,
            scheduler=run.lr_sched,
            scheduler_interval="step",
            seed=cfg.train.seed,
            on_progress=reports.append,
            progress_every=cfg.train.log_every,
            max_grad_norm=cfg.train.grad_clip or None,
        )
        done = result.steps
        state.step += done
        state.epoch = state.step // budget.steps_per_epoch
        loss = result.loss if not math.isnan(result.loss) else (reports[-1]["loss"] if reports else math.nan)
        run.log_step(
            state.epoch,
            0,
            loss,
            run.lr_sched.get_last_lr()[0],
            done,
            time.time() - tic,
            run.splits.info.get("block_size") if run.kind == "lm" else None,
        )
        if run.boundary(state.epoch):
            return True
    return False
