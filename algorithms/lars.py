"""LARS (You, Gitman, Ginsburg, 2017) as in docs/algorithms.md (MBSGD), usable alone or under any CommOptimizer:

    local_lr = eta * ||w|| / (||g|| + wd * ||w||)      (1.0 when ||w|| or ||g|| is 0)
    buf = m * buf + lr * local_lr * (g + wd * w);  w -= buf

Parameters with one dimension or fewer (biases, normalisation weights) are excluded from the
adaptation and from weight decay by default (`exclude_bias_and_norm`); a param group may override it
with its own `exclude_bias_and_norm` key. Nesterov momentum does not apply to LARS."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch


class LARS(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        exclude_bias_and_norm: bool = True,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        if not trust_coefficient > 0.0:
            raise ValueError(f"trust_coefficient must be > 0, got {trust_coefficient}")
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                weight_decay=weight_decay,
                trust_coefficient=trust_coefficient,
                exclude_bias_and_norm=exclude_bias_and_norm,
            ),
        )

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, m = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                excluded = group["exclude_bias_and_norm"] and p.ndim <= 1
                wd = 0.0 if excluded else group["weight_decay"]
                local_lr = 1.0 if excluded else self._trust_ratio(p, g, wd, group["trust_coefficient"])
                update = g.add(p, alpha=wd) if wd else g.clone()
                update.mul_(lr * local_lr)
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = update
                else:
                    buf.mul_(m).add_(update)
                p.sub_(buf)
        return loss

    @staticmethod
    def _trust_ratio(w: torch.Tensor, g: torch.Tensor, wd: float, eta: float) -> float:
        w_norm, g_norm = float(torch.linalg.vector_norm(w)), float(torch.linalg.vector_norm(g))
        if w_norm == 0.0 or g_norm == 0.0:
            return 1.0
        return eta * w_norm / (g_norm + wd * w_norm)
