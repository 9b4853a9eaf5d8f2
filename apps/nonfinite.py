"""A run whose loss or parameters stop being finite stops there, with an error naming the step, rather than
training on to `loss nan` and `done` (exit code failure.EXIT_NONFINITE). The loss is checked every step (a
number the loop has anyway), the parameters where an evaluation or a checkpoint is due (one pass over
them). `train.allow_nonfinite: true` trains on regardless."""

from __future__ import annotations

import math
from typing import Iterable

import torch


class NonFiniteError(RuntimeError):
    """The loss or a parameter became inf or nan; the message names the step and what was seen."""


def check_loss(loss: float, step: int, allowed: bool) -> None:
    """Raise NonFiniteError when `loss` (the loss of optimizer step `step`, counted from 1) is inf or nan."""
    if not allowed and not math.isfinite(loss):
        raise NonFiniteError(
            f"the loss is {loss} at step {step}: training diverged (lower optim.lr or the "
            "algorithm's step sizes, or set train.grad_clip); train.allow_nonfinite=true trains on"
        )


def check_parameters(named: Iterable[tuple[str, torch.Tensor]], step: int, allowed: bool) -> None:
    """Raise NonFiniteError naming the first parameter holding inf or nan after step `step`."""
    if allowed:
        return
    for name, p in named:
        if p.numel() and not bool(torch.isfinite(p.detach()).all()):
            raise NonFiniteError(
                f"parameter {name} holds inf or nan after step {step}: training diverged (lower "
                "optim.lr or the algorithm's step sizes, or set train.grad_clip); "
                "train.allow_nonfinite=true trains on"
            )
