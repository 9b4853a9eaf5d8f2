"""Learning-rate schedules by optimizer step: linear warm-up from baseline_lr, then cosine to min_lr,
multistep (milestones, gamma) or constant. Epoch-valued settings are converted by the caller."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Schedule:
    name: str
    lr: float
    total_steps: int
    warmup_steps: int = 0
    baseline_lr: float = 0.0
    min_lr: float = 0.0
    milestones: list[int] = field(default_factory=list)  # steps
    gamma: float = 0.1

    def __post_init__(self) -> None:
        if self.name not in ("constant", "cosine", "multistep"):
            raise ValueError(f"schedule.name must be constant, cosine or multistep, got {self.name!r}")
        if self.total_steps <= 0:
            raise ValueError(f"total_steps must be > 0, got {self.total_steps}")

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.baseline_lr + (self.lr - self.baseline_lr) * step / self.warmup_steps
        if self.name == "cosine":
            span = max(self.total_steps - self.warmup_steps, 1)
            progress = min((step - self.warmup_steps) / span, 1.0)
            return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))
        if self.name == "multistep":
            return self.lr * self.gamma ** bisect.bisect_right(self.milestones, step)
        return self.lr

    def scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        """A torch scheduler (so its state_dict is the stub's lr_state_dict.pt); every group's base lr
        must be `lr`, as the factor is relative to it."""
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: self(step) / self.lr)
