"""How ssp and asyncps correct for staleness (`staleness_correction`; algorithms/ps/README.md).
Stale gradients act like extra momentum: asynchrony with mean staleness s adds an implicit momentum of about
s / (1 + s) (Mitliagkas et al., "Asynchrony begets momentum", 2016), so an explicit momentum of 0.9 on top
of it goes past 1 in total and the iterates diverge (benchmarks/ssp_momentum.py measures it: ssp K = 2,
momentum 0.9, MNIST: 11% with the plain rule, 94% with "momentum"). Hence "momentum" is the default of
both (None: the plain rule of docs/algorithms.md). The remedies are the identity when no gradient is stale
(K = 0 stays mbsgd; asyncps with one worker stays SGD):

- "momentum": each averaged step uses the explicit momentum lowered by the implicit one its gradients
  carry, mu' = max(0, mu - s / (1 + s)), s the mean staleness of that step's contributions (every replica
  knows them, so all take the same step);
- "scale" (ssp): each contribution to a step's mean is scaled by 1 / (1 + s), s its own staleness (the
  staleness-aware rule asyncps always applies, Zhang et al. 2016).
asyncps's "momentum" lowers the server's momentum for each push by the implicit one of that push's
staleness, on top of its 1 / (1 + s) step."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

CORRECTIONS = (None, "momentum", "scale")  # ssp's
ASYNC_CORRECTIONS = (None, "momentum")  # asyncps's (its rule scales by 1 / (1 + s) already)
DEFAULT_CORRECTION = "momentum"


def compensated_momentum(momentum: float, staleness: float) -> float:
    """The explicit momentum that keeps explicit + implicit (s / (1 + s)) at `momentum`."""
    return max(0.0, momentum - staleness / (1.0 + staleness))


def stale_scale(staleness: int) -> float:
    """The weight of a contribution computed `staleness` averaged steps behind."""
    return 1.0 / (1.0 + staleness)


@contextmanager
def momentum_lowered(optimizer: torch.optim.Optimizer, staleness: float) -> Iterator[None]:
    """The optimizer's groups' momentum compensated for `staleness` while inside (restored after)."""
    saved = [g.get("momentum") for g in optimizer.param_groups]
    for g, mu in zip(optimizer.param_groups, saved):
        if mu:
            g["momentum"] = compensated_momentum(mu, staleness)
    try:
        yield
    finally:
        for g, mu in zip(optimizer.param_groups, saved):
            if mu is not None:
                g["momentum"] = mu
