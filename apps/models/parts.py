"""Cutting the reference models into pipeline stages: a model that can be cut offers `pipeline_layers()`,
an nn.Sequential whose layers applied in order compute its forward and share its modules and
parameters (so a stage trains the model's own tensors). The glue between its blocks (a stem, a pooled
head) is a `Part`: a function of some of the model's modules, the same function the model's forward
calls, so the cut and the whole compute alike."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


class Part(nn.Module):
    """fn(self, x) over the given modules (and parameters, and plain values), held as attributes under
    the names fn reads, as the model holds them."""

    def __init__(self, fn: Callable[[Any, torch.Tensor], torch.Tensor], **members: Any) -> None:
        super().__init__()
        self.fn = fn
        for name, member in members.items():
            setattr(self, name, member)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)

    def extra_repr(self) -> str:
        return getattr(self.fn, "__name__", "")


def can_be_cut(model_class: Any) -> bool:
    """Whether models of this class (or factory's result type) offer pipeline_layers()."""
    return callable(getattr(model_class, "pipeline_layers", None))
