"""On every rank: apps.bn_stats.reestimate replaces BatchNorm running statistics by the plain average
over the given batches, then averages them over ranks (opt.average_buffers): every rank ends with
the mean of all ranks' statistics, whatever they held before."""

from __future__ import annotations

import torch
from torch import nn

import algorithms
from apps import bn_stats
from apps.dist import Dist


def batches(rank: int) -> list[tuple[torch.Tensor]]:
    g = torch.Generator().manual_seed(rank)
    return [(torch.randn(8, 3, generator=g) * (rank + 1) + rank,) for _ in range(3)]


def main() -> None:
    dist = Dist.init("mpi")
    assert dist.size > 1, dist
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), algorithm="plsgd", comm=dist.comm, model=model
    )
    bn = model[1]
    bn.running_mean.fill_(100.0 * (dist.rank + 1))  # stale, different per rank: must not survive
    used = bn_stats.reestimate(model, batches(dist.rank)[:2], lambda m, b: m(b[0]), opt)
    assert used == 2 and bn.momentum == 0.1 and model.training, (used, bn.momentum)
    with torch.no_grad():
        means = [torch.stack([model[0](x).mean(0) for (x,) in batches(r)[:2]]).mean(0) for r in range(dist.size)]
    expected = torch.stack(means).mean(0)
    assert torch.allclose(bn.running_mean, expected, atol=1e-5), (bn.running_mean, expected)
    assert bn_stats.reestimate(nn.Linear(3, 3), batches(dist.rank), lambda m, b: m(b[0]), opt) == 0
    print(f"rank {dist.rank} ok", flush=True)


if __name__ == "__main__":
    main()
