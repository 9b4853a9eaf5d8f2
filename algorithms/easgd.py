"""EASGD and EASGD+ (Zhang, Choromanska, LeCun 2015; SDTL's interface), synchronous, with a centre c
identical on every rank (computed from all-reduced values, so there is no server).

EASGD round, c_s = dist_pulling_strength, alpha = c_s / N, right-hand sides from before the round:
    x_i <- (1 - alpha) x_i + alpha c;   c <- (1 - c_s) c + c_s mean_j x_j
EASGD+ round, with v_i = 0.9 v_i + 0.1 g_i^2 updated every step:
    m_w = sum_j v_j x_j / sum_j v_j;  delta = c_s (m_w - c);  c += delta;  x_i <- (1 - c_s)(x_i + delta) + c_s c
Where sum_j v_j is 0 (no rank has ever seen a gradient there) m_w is taken as c, so delta is 0."""
from __future__ import annotations

from typing import Any

import torch

import pycomm
from algorithms.base import clone_all, copy_into
from algorithms.elastic import ElasticBase, elastic_
from algorithms.registry import register


@register("easgd")
class EASGD(ElasticBase):
    def _round(self) -> None:
        c_s = self.options["dist_pulling_strength"]
        mean = self._mean_params()
        elastic_(self._x, self._centre, c_s / self.comm.size)
        elastic_(self._centre, mean, c_s)


@register("easgd+")
class EASGDPlus(ElasticBase):
    def _setup(self) -> None:
        super()._setup()
        self.v = [torch.zeros_like(p) for p in self.params]

    def _before_step(self, loss: float | None) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        torch._foreach_mul_(self.v, 0.9)
        torch._foreach_addcmul_(self.v, grads, grads, value=0.1)

    def _round(self) -> None:
        c_s = self.options["dist_pulling_strength"]
        # sum_j v_j (x_j - c) / sum_j v_j = m_w - c; the difference from c is what may be compressed.
        weighted = torch._foreach_mul(self.v, torch._foreach_sub(self._x, self._centre))
        v_sum = clone_all(self.v)
        pending = self.channel.allreduce_async(v_sum, op=pycomm.SUM, compress=False)
        self.channel.allreduce(weighted, op=pycomm.SUM, key="weighted")
        pending.wait()
        for w, s in zip(weighted, v_sum):
            w.copy_(torch.where(s > 0, w / s, torch.zeros_like(w)))  # now m_w - c
        delta = torch._foreach_mul(weighted, c_s)
        torch._foreach_add_(self._centre, delta)
        torch._foreach_add_(self._x, delta)
        elastic_(self._x, self._centre, c_s)

    def _algorithm_state(self) -> dict[str, Any]:
        return {**super()._algorithm_state(), "v": clone_all(self.v)}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        super()._load_algorithm_state(state)
        copy_into(self.v, state["v"])
