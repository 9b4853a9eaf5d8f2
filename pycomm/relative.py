"""Averaging values that every rank holds close to a common reference (the previous round's average,
EASGD's centre): what travels is x - reference, the drift, and the mean is rebuilt as
reference + mean_j (x_j - reference). A codec's error scales with what it encodes, so it then scales
with the drift instead of the weights. The reference must hold the same bytes on every rank."""

from __future__ import annotations

from typing import Sequence

import torch


def to_relative(
    xs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor], out: Sequence[torch.Tensor] | None = None
) -> list[torch.Tensor]:
    """x - reference for every pair (into `out` when given): what travels."""
    if out is None:
        return list(torch._foreach_sub(list(xs), list(reference)))
    for o, x, r in zip(out, xs, reference):
        torch.sub(x, r, out=o)
    return list(out)


def from_relative(means: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> None:
    """mean_j (x_j - reference) -> mean_j x_j, in place."""
    torch._foreach_add_(list(means), list(reference))
