"""A small deterministic problem for checking update rules: an MLP (optionally with BatchNorm) and
fixed per-(rank, step) batches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IN, HIDDEN, CLASSES, BATCH = 6, 10, 3, 8


def make_model(seed: int, batchnorm: bool = False) -> torch.nn.Module:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = [torch.nn.Linear(IN, HIDDEN)]
    if batchnorm:
        layers.append(torch.nn.BatchNorm1d(HIDDEN))
    layers += [torch.nn.Tanh(), torch.nn.Linear(HIDDEN, CLASSES)]
    return torch.nn.Sequential(*layers)


def batch(rank: int, step: int, size: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100_003 * (rank + 1) + step)
    x = torch.randn(size, IN, generator=g)
    y = torch.randint(0, CLASSES, (size,), generator=g)
    return x, y


def loss_on(model: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    x, y = batch(rank, step)
    return F.cross_entropy(model(x), y)


def make_inner(kind: str, params, lr: float = 0.1) -> torch.optim.Optimizer:
    """The wrapped (local) optimizer of a configuration."""
    from algorithms import LARS

    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=1e-3)
    if kind == "lars":
        return LARS(params, lr=lr, momentum=0.9, weight_decay=1e-3, trust_coefficient=0.02)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr / 10, weight_decay=1e-2)
    raise ValueError(kind)


def lr_at(step: int, base: float) -> float:
    """A decaying learning rate (QSR's H depends on it): base / (1 + step / 4)."""
    return base / (1.0 + step / 4.0)
