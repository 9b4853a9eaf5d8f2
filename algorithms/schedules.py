"""Learning-rate schedules as torch LR schedulers, stepped once per optimizer step (or per epoch,
as the caller counts): cosine with linear warm-up, multistep, constant. (A pipeline's schedule of
micro-batches is another thing: algorithms/pipeline/pipeline_schedules.py.) Each accepts a torch
optimizer or a CommOptimizer, which is one and shares its wrapped optimizer's param_groups: schedule
the optimizer the loop steps, so that torch's check that `optimizer.step()` ran before
`lr_scheduler.step()` watches the right one (a CommOptimizer that steps an optimizer of its own inside,
as ZeRO's shard optimizer and ssp do, never calls the wrapped one's step)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch.optim.lr_scheduler import LRScheduler


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The optimizer to schedule: a torch optimizer (a CommOptimizer included) itself, else the torch
    optimizer another wrapper holds as `.optimizer`."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    inner = getattr(optimizer, "optimizer", None)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch optimizer or a CommOptimizer, got {type(optimizer).__name__}")
    return inner


class CosineWithWarmup(LRScheduler):
    """Linear warm-up from `baseline_lr` to each group's lr over `warmup_steps`, then cosine decay to
    `min_lr` at `total_steps` (held there afterwards)."""

    def __init__(
        self,
        optimizer: Any,
        total_steps: int,
        warmup_steps: int = 0,
        baseline_lr: float = 0.0,
        min_lr: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"warmup_steps must be in [0, total_steps={total_steps}], got {warmup_steps}")
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        self.baseline_lr, self.min_lr = baseline_lr, min_lr
        super().__init__(_torch_optimizer(optimizer), last_epoch)

    def lr_at(self, step: int, peak: float) -> float:
        if step < self.warmup_steps:
            return self.baseline_lr + (peak - self.baseline_lr) * step / self.warmup_steps
        span = self.total_steps - self.warmup_steps
        progress = min(step - self.warmup_steps, span) / span if span else 1.0
        return self.min_lr + (peak - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def rates_at(self, step: int) -> list[float]:
        """Each group's rate at `step`, without moving the schedule."""
        return [self.lr_at(step, base) for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        return self.rates_at(self.last_epoch)

    _get_closed_form_lr = get_lr  # the rate depends on last_epoch alone: step(epoch) may set any point


class MultiStep(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= step)."""

    def __init__(self, optimizer: Any, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1) -> None:
        if list(milestones) != sorted(milestones):
            raise ValueError(f"milestones must be increasing, got {list(milestones)}")
        self.milestones, self.gamma = list(milestones), gamma
        super().__init__(_torch_optimizer(optimizer), last_epoch)

    def rates_at(self, step: int) -> list[float]:
        """Each group's rate at `step`, without moving the schedule."""
        passed = sum(1 for m in self.milestones if m <= step)
        return [base * self.gamma**passed for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        return self.rates_at(self.last_epoch)

    _get_closed_form_lr = get_lr


class Constant(LRScheduler):
    """lr = base_lr throughout (a scheduler, so training loops treat every schedule alike)."""

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        super().__init__(_torch_optimizer(optimizer), last_epoch)

    def rates_at(self, step: int) -> list[float]:
        """Each group's rate at `step` (the same at every step)."""
        return list(self.base_lrs)

    def get_lr(self) -> list[float]:
        return self.rates_at(self.last_epoch)

    _get_closed_form_lr = get_lr


def continue_at(scheduler: LRScheduler, saved: dict[str, Any], step: int) -> None:
    """Resume `scheduler`, built for this run (its horizon, warm-up and milestones in this run's steps),
    at `step` of it, with the base learning rates of the saved state (`saved`, a state_dict() of the
    same kind of schedule). load_state_dict would bring back the saved horizon, which is wrong once a
    step stands for another number of samples (a run resumed on another number of ranks)."""
    scheduler.base_lrs = list(saved.get("base_lrs", scheduler.base_lrs))
    scheduler.last_epoch = step
    for group, lr in zip(scheduler.optimizer.param_groups, scheduler.get_lr()):
        group["lr"] = lr
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
