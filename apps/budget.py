"""Epochs -> optimizer steps: the run's length, the schedule's horizon, and the eval/checkpoint cadence."""
from __future__ import annotations

from dataclasses import dataclass

from typing import Any

import torch

from apps.config import Config


@dataclass(frozen=True)
class Budget:
    steps_per_epoch: int
    total_steps: int        # steps this run trains for
    schedule_steps: int     # the learning-rate schedule's horizon (may exceed total_steps)
    warmup_steps: int
    eval_every: int
    checkpoint_every: int

    @classmethod
    def from_config(cls, cfg: Config, steps_per_epoch: int) -> "Budget":
        spe = steps_per_epoch
        total = int(round(cfg.train.epochs * spe))
        if cfg.train.max_steps:
            total = min(total, cfg.train.max_steps) if cfg.train.epochs > 0 else cfg.train.max_steps
        if total <= 0:
            raise ValueError(f"train.epochs={cfg.train.epochs} gives no step at {spe} steps per epoch")
        sched = cfg.schedule
        horizon = int(round(sched.total_epochs * spe)) if sched.total_epochs else total
        warmup = sched.warmup_steps if sched.warmup_steps is not None else int(round(sched.warmup_epochs * spe))
        return cls(spe, total, max(horizon, 1), warmup, max(1, int(round(cfg.train.eval_every_epochs * spe))),
                   cfg.checkpoint.every_steps or spe)

    def scheduler(self, cfg: Config, optimizer: torch.optim.Optimizer) -> Any:
        """The learning-rate schedule (algorithms.schedules), stepped once per optimizer step."""
        from algorithms import Constant, CosineWithWarmup, MultiStep

        s = cfg.schedule
        if s.name == "cosine":
            return CosineWithWarmup(optimizer, self.schedule_steps, min(self.warmup_steps, self.schedule_steps),
                                    s.baseline_lr, s.min_lr)
        if self.warmup_steps:
            raise ValueError(f"schedule.warmup_* is supported with schedule.name=cosine, not {s.name!r}")
        if s.name == "multistep":
            return MultiStep(optimizer, sorted(int(round(m * self.steps_per_epoch)) for m in s.milestones), s.gamma)
        return Constant(optimizer)
