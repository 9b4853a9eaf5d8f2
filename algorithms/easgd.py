"""EASGD and EASGD+ (Zhang, Choromanska, LeCun 2015; SDTL's interface), synchronous, with a centre c
identical on every rank (computed from all-reduced values, so there is no server).

EASGD round, c_s = dist_pulling_strength, alpha = c_s / N, right-hand sides from before the round:
    x_i <- (1 - alpha) x_i + alpha c;   c <- (1 - c_s) c + c_s mean_j x_j
EASGD+ round, with v_i = 0.9 v_i + 0.1 g_i^2 updated every step:
    m_w = sum_j v_j x_j / sum_j v_j;  delta = c_s (m_w - c);  c += delta;  x_i <- (1 - c_s)(x_i + delta) + c_s c
Where sum_j v_j is 0 (no rank has ever seen a gradient there) m_w is taken as c, so delta is 0.
As in SDTL's code (docs/algorithms.md, EASGD+), the c a round starts from is not the last round's: it restarts as
the mean of the workers' parameters right after the previous round (the initial parameters before the
first), while the local pull between rounds goes to the c the last round computed. That mean is
computed in the round that ends, from mean_j x_j (one more parameter-sized all-reduce per round, as in
SDTL): mean_j x_j' = (1 - c_s)(mean_j x_j + delta) + c_s c. With a codec that mean is the
compressed one (identical on every rank). Divergence from SDTL kept: SDTL weights by v_j + 1e-8, pycomm
by v_j exactly (m_w = the round's starting c where sum_j v_j = 0)."""

from __future__ import annotations

from typing import Any

import torch

import pycomm
from algorithms.base import clone_all, copy_into
from algorithms.elastic import ElasticBase, elastic_
from algorithms.registry import register


@register("easgd")
class EASGD(ElasticBase):
    across_shards = True  # elementwise on the parameters: also over ZeRO's master shards across replicas

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
        self._restart = clone_all(self._centre)  # c at the start of the next round (see the docstring)

    def _before_step(self, loss: float | None) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        torch._foreach_mul_(self.v, 0.9)
        torch._foreach_addcmul_(self.v, grads, grads, value=0.1)

    def _round(self) -> None:
        c_s = self.options["dist_pulling_strength"]
        base = self._restart
        # sum_j v_j (x_j - base) / sum_j v_j = m_w - base; the difference from base is what may be compressed.
        weighted = torch._foreach_mul(self.v, torch._foreach_sub(self._x, base))
        v_sum = clone_all(self.v)
        pending = self.channel.allreduce_async(v_sum, op=pycomm.SUM, compress=False)
        mean = self._mean_params(base)
        self.channel.allreduce(weighted, op=pycomm.SUM, key="weighted")
        pending.wait()
        for w, s in zip(weighted, v_sum):
            w.copy_(torch.where(s > 0, w / s, torch.zeros_like(w)))  # now m_w - base
        delta = torch._foreach_mul(weighted, c_s)
        copy_into(self._centre, torch._foreach_add(base, delta))
        torch._foreach_add_(self._x, delta)
        elastic_(self._x, self._centre, c_s)
        torch._foreach_add_(mean, delta)  # the mean of the workers' parameters now
        elastic_(mean, self._centre, c_s)
        copy_into(self._restart, mean)

    def _algorithm_state(self) -> dict[str, Any]:
        return {**super()._algorithm_state(), "v": clone_all(self.v), "restart": clone_all(self._restart)}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        super()._load_algorithm_state(state)
        if "restart" not in state:
            raise ValueError(
                "this easgd+ state has no 'restart' (the centre the next round starts from): it was "
                "written before the round restarted its centre from the workers' mean; resume "
                "it with the pycomm version that wrote it"
            )
        copy_into(self.v, state["v"])
        copy_into(self._restart, state["restart"])
