"""Epochs -> optimizer steps: the run's length, the schedule's horizon, and the eval/checkpoint cadence."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from apps.config.schema import Config


@dataclass(frozen=True)
class Budget:
    steps_per_epoch: int
    total_steps: int  # steps this run trains for
    schedule_steps: int  # the learning-rate schedule's horizon (may exceed total_steps)
    warmup_steps: int
    eval_every: int
    checkpoint_every: int
    schedule_source: str = "train.epochs"  # the key the horizon comes from
    schedule_offset: int = 0  # the schedule's step minus the run's step counter (after a resume on other ranks)

    @classmethod
    def from_config(cls, cfg: Config, steps_per_epoch: int, step_scale: float = 1.0) -> "Budget":
        """train.max_steps stops the run early but leaves the schedule's horizon alone: that is
        schedule.total_steps, else schedule.total_epochs, else train.epochs (train.max_steps only
        when train.epochs is 0). Counts in the config's steps (train.max_steps, schedule.total_steps,
        schedule.warmup_steps) are steps of the world that started the run; `step_scale` (its samples
        per step / this world's) turns them into this world's, so a run resumed on other ranks keeps
        its length and its schedule in samples."""
        spe, t, sched = steps_per_epoch, cfg.train, cfg.schedule

        def steps(count: int) -> int:
            return max(int(round(count * step_scale)), 1)

        total = int(round(t.epochs * spe))
        if t.max_steps:
            total = min(total, steps(t.max_steps)) if t.epochs > 0 else steps(t.max_steps)
        if total <= 0:
            raise ValueError(f"train.epochs={t.epochs} gives no step at {spe} steps per epoch")
        if sched.total_steps:
            horizon, source = steps(sched.total_steps), "schedule.total_steps"
        elif sched.total_epochs:
            horizon, source = int(round(sched.total_epochs * spe)), f"schedule.total_epochs={sched.total_epochs:g}"
        elif t.epochs > 0:
            horizon, source = int(round(t.epochs * spe)), f"train.epochs={t.epochs:g}"
        else:
            horizon, source = total, "train.max_steps (train.epochs=0)"
        warmup = (
            int(round(sched.warmup_steps * step_scale))
            if sched.warmup_steps is not None
            else int(round(sched.warmup_epochs * spe))
        )
        return cls(
            spe,
            total,
            max(horizon, 1),
            warmup,
            max(1, int(round(t.eval_every_epochs * spe))),
            cfg.checkpoint.every_steps or spe,
            source,
        )

    def resumed(self, step: int, progress: int) -> "Budget":
        """This budget for a run resumed at optimizer step `step` that stands at `progress` of this
        world's steps (ShardPlan.progress; they differ after a resume on another global batch): it
        ends where this world's uninterrupted run would, counted in the run's own steps, and its
        schedule stands at `progress`."""
        return replace(self, total_steps=self.total_steps - progress + step, schedule_offset=progress - step)

    def describe(self) -> str:
        """One line for the log: which horizon the learning-rate schedule uses."""
        text = f"lr schedule horizon {self.schedule_steps} steps (from {self.schedule_source})"
        end = self.total_steps + self.schedule_offset
        if end < self.schedule_steps:
            text += f"; this run stops at step {end} of it, before it ends"
            if not self.schedule_offset:
                text += f" (set schedule.total_steps={end} to end the schedule there)"
        return text

    def scheduler(self, cfg: Config, optimizer: torch.optim.Optimizer) -> Any:
        """The learning-rate schedule (algorithms.schedules), stepped once per optimizer step."""
        from algorithms import Constant, CosineWithWarmup, MultiStep

        s = cfg.schedule
        if s.name == "cosine":
            return CosineWithWarmup(
                optimizer, self.schedule_steps, min(self.warmup_steps, self.schedule_steps), s.baseline_lr, s.min_lr
            )
        if self.warmup_steps:
            raise ValueError(f"schedule.warmup_* is supported with schedule.name=cosine, not {s.name!r}")
        if s.name == "multistep":
            return MultiStep(optimizer, sorted(int(round(m * self.steps_per_epoch)) for m in s.milestones), s.gamma)
        return Constant(optimizer)
