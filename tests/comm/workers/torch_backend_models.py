"""Shared by the torch backend workers: training a model with a torch.distributed wrapper on one process
group, from fixed seeds, so two backends' runs can be compared parameter by parameter."""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(step: int, rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of `step` (different per rank and step, the same for every backend)."""
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
    return torch.randn(rows, 16, generator=g), torch.randint(0, 4, (rows,), generator=g)


def train(model: nn.Module, steps: int, after_backward: Callable[[], None] = lambda: None) -> list[torch.Tensor]:
    """`steps` SGD steps of cross-entropy on this rank's batches; the parameters afterwards."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        after_backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor], what: str, exact: bool = True) -> None:
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        ok = torch.equal(x, y) if exact else torch.allclose(x, y, rtol=1e-5, atol=1e-6)
        assert ok, f"{what}: parameter {i} differs by up to {(x - y).abs().max().item()}"
