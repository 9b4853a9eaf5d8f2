"""Markers left in `p.grad` where a method has moved the reduced gradient off the parameters (ZeRO-2/3 keep
only their gradient shard). With `p.grad` None, torch's `clip_grad_norm_(model.parameters(), ...)` would
find no gradient, return 0 and clip nothing, and a loop logging gradient norms would log nothing. A marker
is a storage-less tensor of the parameter's shape, dtype and device whose every operation raises an error
naming the method and `opt.clip_grad_norm_`, so that the first such call fails where it is made.

The method places the markers when its reduction of the step is complete and removes them when the step
consumes the gradient (or at zero_grad), so the next backward accumulates into None as usual."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class GradientHeldElsewhere(torch.Tensor):
    """A parameter's .grad while `holder` (an algorithm name) keeps the reduced gradient elsewhere."""

    holder: str

    @staticmethod
    def __new__(cls, param: torch.Tensor, holder: str) -> "GradientHeldElsewhere":
        t = torch.Tensor._make_wrapper_subclass(cls, param.shape, dtype=param.dtype, device=param.device)
        t.holder = holder
        return t

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        holder = next((a.holder for a in args if isinstance(a, GradientHeldElsewhere)), "this algorithm")
        if args and isinstance(args[0], (list, tuple)):  # a foreach op takes the gradients as one list
            holder = next((a.holder for a in args[0] if isinstance(a, GradientHeldElsewhere)), holder)
        raise RuntimeError(
            f"{func}: this parameter's .grad is a placeholder: {holder} moved the reduced gradient off the "
            f"parameters (each rank keeps its shard). Clip with opt.clip_grad_norm_(max_norm, norm_type) instead "
            f"of torch.nn.utils.clip_grad_norm_(model.parameters(), ...), which would see no gradient and clip "
            f"nothing; read the gradient norm from its return value; call opt.step() or opt.zero_grad() before "
            f"the next backward"
        )

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # printing must not raise
        return f"GradientHeldElsewhere(shape={tuple(self.shape)}, holder={self.holder!r})"


def place(params: Iterable[torch.Tensor], holder: str) -> None:
    """A marker on every parameter whose gradient the method has taken (p.grad None)."""
    for p in params:
        if p.grad is None:
            p.grad = GradientHeldElsewhere(p, holder)


def clear(params: Iterable[torch.Tensor]) -> None:
    for p in params:
        if isinstance(p.grad, GradientHeldElsewhere):
            p.grad = None


def real_grad(p: torch.Tensor) -> torch.Tensor | None:
    """p.grad, or None where it is a marker."""
    return None if isinstance(p.grad, GradientHeldElsewhere) else p.grad


class PlaceOnWait:
    """A reduction's work whose wait() also places the markers on its parameters (once the gradients were
    packed and freed)."""

    def __init__(self, work: Any, params: list[torch.Tensor], holder: str) -> None:
        self.work, self.params, self.holder = work, params, holder

    def wait(self) -> None:
        self.work.wait()
        place(self.params, self.holder)
