"""The models, batches and reference for the pipeline tests: small float64 models whose unsplit
forward/backward on one process is the reference for every split."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

BATCH = 24  # divisible by every micro-batch count the tests use (1, 2, 3, 4, 6, 8), also per replica
KINDS = ("mlp", "deep", "tokens")
RTOL, ATOL = 1e-5, 1e-12


def make_model(kind: str, seed: int) -> nn.Sequential:
    """mlp: 9 layers (5 Linear + Tanh); deep: 17 layers (9 Linear + Tanh); tokens: 7 layers, an Embedding
    over integer inputs first (stage 0 receives no gradient for its input)."""
    torch.manual_seed(seed)
    if kind in ("mlp", "deep"):
        widths = [6, 16, 16, 16, 16, 3] if kind == "mlp" else [6] + [16] * 8 + [3]
        layers: list[nn.Module] = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.Tanh()]
        return nn.Sequential(*layers[:-1]).double()
    if kind == "tokens":
        return nn.Sequential(
            nn.Embedding(11, 4),
            nn.Flatten(),
            nn.Linear(20, 16),
            nn.Tanh(),
            nn.Linear(16, 16),
            nn.Tanh(),
            nn.Linear(16, 5),
        ).double()
    raise ValueError(kind)


def make_batch(kind: str, step: int, rows: int = BATCH) -> tuple[torch.Tensor, torch.Tensor, Callable[..., Any]]:
    """(x, y, loss_fn) of step `step`, the same on every rank."""
    g = torch.Generator().manual_seed(100 + step)
    if kind in ("mlp", "deep"):
        return (
            torch.randn(rows, 6, generator=g, dtype=torch.float64),
            torch.randn(rows, 3, generator=g, dtype=torch.float64),
            F.mse_loss,
        )
    return (torch.randint(0, 11, (rows, 5), generator=g), torch.randint(0, 5, (rows,), generator=g), F.cross_entropy)


def reference_step(model: nn.Module, kind: str, step: int) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients of the unsplit model on the whole batch of `step` (gradients zeroed first)."""
    model.zero_grad()
    x, y, loss_fn = make_batch(kind, step)
    loss = loss_fn(model(x), y)
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to rtol 1e-5 (atol 1e-12 for entries near zero; float64 differences are ~1e-16)."""
    return torch.allclose(a, b, rtol=RTOL, atol=ATOL)
