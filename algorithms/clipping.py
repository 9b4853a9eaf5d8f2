"""Gradient clipping by the norm of a gradient that is spread over ranks: torch.nn.utils.clip_grad_norm_'s
rule and return value, where each rank holds a disjoint part of the gradient (a ZeRO shard, a pipeline
stage's layers) and the parts' norms are combined over the communicators that split it (sum of the
p-th powers; max for the inf-norm). Every CommOptimizer's `clip_grad_norm_` and the Pipeline's come here.

Called with no communicators (a rank that holds the whole gradient) it is torch's clip_grad_norm_."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

import pycomm


def _norm_order(norm_type: Any) -> float:
    """torch's norm_type as a float; an order whose per-part norms cannot be combined is refused."""
    try:
        order = float(norm_type)
    except (TypeError, ValueError):
        raise ValueError(f"clip_grad_norm_: norm_type must be a number > 0 or inf, got {norm_type!r}") from None
    if not order > 0:
        raise ValueError(
            f"clip_grad_norm_: norm_type must be > 0 or inf (a norm over the parts the ranks hold), got {norm_type!r}"
        )
    return order


def total_norm(
    grads: Sequence[torch.Tensor], norm_type: Any = 2.0, comms: Sequence[Any] = (), device: torch.device | None = None
) -> torch.Tensor:
    """The norm of all ranks' `grads` together (collective over each of `comms`, which must split the
    gradient into disjoint parts): a 0-dim float64 tensor. Every rank must call it, with or without grads."""
    order = _norm_order(norm_type)
    if device is None:
        device = grads[0].device if grads else torch.device("cpu")
    norms = [torch.linalg.vector_norm(g.detach(), order).to(device=device, dtype=torch.float64) for g in grads]
    if math.isinf(order):
        local = torch.stack(norms).max() if norms else torch.zeros((), dtype=torch.float64, device=device)
        op = pycomm.MAX
    else:
        local = torch.stack(norms).pow(order).sum() if norms else torch.zeros((), dtype=torch.float64, device=device)
        op = pycomm.SUM
    combined = local.reshape(1)
    for comm in comms:
        comm.allreduce(combined, op=op)
    return combined[0] if math.isinf(order) else combined[0].pow(1.0 / order)


@torch.no_grad()
def clip_grad_norm_(
    grads: Sequence[torch.Tensor],
    max_norm: float,
    norm_type: Any = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    comms: Sequence[Any] = (),
    device: torch.device | None = None,
) -> torch.Tensor:
    """Scale `grads` in place by min(1, max_norm / (total + 1e-6)), total being the norm over all ranks'
    parts (`total_norm`); returns the total as torch does (0-dim, in the first gradient's dtype).
    `device`: where the norm is combined (the communicators' device) when this rank holds no gradient."""
    grads = [g for g in grads if g is not None]
    total = total_norm(grads, norm_type, comms, device)
    dtype = grads[0].dtype if grads else torch.get_default_dtype()
    if error_if_nonfinite and not bool(torch.isfinite(total)):
        raise RuntimeError(
            f"The total norm of order {float(norm_type)} for gradients is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    by_type: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for g in grads:
        by_type.setdefault((g.device, g.dtype), []).append(g)
    for (device, dt), group in by_type.items():
        scale = coef.to(device=device, dtype=dt)
        if foreach is False or not group:
            for g in group:
                g.mul_(scale)
        else:
            torch._foreach_mul_(group, scale)
    return total.to(dtype)
