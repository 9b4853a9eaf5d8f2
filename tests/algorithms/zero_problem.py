"""The model and loop the ZeRO tests train: the algorithms' MLP plus a one-element parameter (smaller
than any world size, the case of pytorch/pytorch#108869), AdamW with an LR schedule and gradient clipping."""

from __future__ import annotations

from typing import Any

import torch

from tests.algorithms.problem import loss_on, make_model

CLIP = 0.5


class TinyScaled(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.body = make_model(seed)
        self.scale = torch.nn.Parameter(torch.ones(1) * 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * self.scale


def make_inner(kind: str, params: Any) -> torch.optim.Optimizer:
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=1e-2)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    raise ValueError(kind)


def train(model: torch.nn.Module, opt: Any, rank: int, steps: int, first: int = 0) -> None:
    """`steps` steps from step `first`: LambdaLR halving the LR, clipping through the optimizer's own
    clip_grad_norm_ where it has one (sharded gradients), else torch's."""
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 / (1.0 + (t + first) / 5.0))
    for t in range(first, first + steps):
        opt.zero_grad()
        loss = loss_on(model, rank, t)
        loss.float().backward()
        if hasattr(opt, "clip_grad_norm_"):
            opt.clip_grad_norm_(CLIP)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step(loss=loss)
        sched.step()
