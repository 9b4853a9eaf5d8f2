"""An algorithm that lives outside algorithms/ and apps/: majority-vote signSGD (Bernstein et al. 2018),
registered from this test module, to prove a new algorithm needs no edit in apps/ (apps.train finds it
through algorithm.module and drives it through its declared traits)."""

from __future__ import annotations

from typing import Any

import torch

import pycomm
from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.registry import register


@register("test-signsgd")
class MajorityVoteSignSGD(CommOptimizer):
    training = traits.WRAPPER
    state_layout = traits.IDENTICAL  # every rank applies the same voted signs
    algorithm_options: dict[str, Any] = {}

    @torch.no_grad()
    def _step(self, loss: float | None) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        votes = [torch.sign(g) for g in grads]
        self.channel.allreduce(votes, op=pycomm.SUM, compress=False)
        for g, v in zip(grads, votes):
            g.copy_(torch.sign(v))
        self.optimizer.step()
