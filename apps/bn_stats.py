"""BatchNorm statistics re-estimated before evaluation (QSR's --bn-batches): the running averages a
model accumulated while its weights moved describe no single model, and local methods' ranks each
hold their own. Re-estimating them on a few training micro-batches of the current weights, then
averaging over ranks, gives every rank the statistics of the model being evaluated."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import nn


def batchnorms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


@torch.no_grad()
def reestimate(
    model: nn.Module,
    batches: Iterable[tuple[torch.Tensor, ...]],
    forward: Callable[[nn.Module, tuple[torch.Tensor, ...]], Any],
    opt: Any = None,
) -> int:
    """Reset every BatchNorm's running statistics to the plain average over `batches` (forward
    passes in training mode, no gradients), then average them over ranks with `opt.average_buffers()`
    where the optimizer has it. Returns the batches used (0: the model has no BatchNorm; nothing done).
    Every rank must call it at the same point (the averaging is a collective)."""
    norms = batchnorms(model)
    if not norms:
        return 0
    momenta = [m.momentum for m in norms]
    was_training = model.training
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average: every batch counts the same
    model.train()
    used = 0
    try:
        for batch in batches:
            forward(model, batch)
            used += 1
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        model.train(was_training)
    if hasattr(opt, "average_buffers"):
        opt.average_buffers()
    return used
