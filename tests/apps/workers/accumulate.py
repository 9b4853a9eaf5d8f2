"""On every rank: apps.train.forward_backward over micro-batches gives the gradients of the whole
batch, runs the number of micro-batches asked for, and (mbsgd) communicates nothing before the last
backward (all earlier ones inside opt.no_sync()); plsgd, which has no no_sync, accumulates too."""

from __future__ import annotations

import torch

import algorithms
from apps.dist import Dist
from apps.models.small import MLP
from apps.tasks import classify
from apps.train import forward_backward

BATCH, MICRO = 16, 4


def data(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(BATCH, 1, 28, 28, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def reference_grads(model: MLP, ranks: list[int]) -> list[torch.Tensor]:
    """Mean over `ranks` of each rank's full-batch gradient, computed here without communication."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for r in ranks:
        copy = MLP(hidden=(8,))
        copy.load_state_dict(model.state_dict())
        classify(copy, data(r)).loss.backward()
        for t, p in zip(total, copy.parameters()):
            t += p.grad / len(ranks)
    return total


def check(algorithm: str, dist: Dist) -> None:
    torch.manual_seed(0)
    model = MLP(hidden=(8,))
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        algorithm=algorithm,
        comm=dist.comm,
        model=model,
        **({"averaging_freq": 1} if algorithm == "plsgd" else {}),
    )
    launched_at_forward: list[int] = []

    def counting_task(m: torch.nn.Module, batch: tuple[torch.Tensor, ...]):
        launched_at_forward.append(getattr(opt, "launched_buckets", 0))
        return classify(m, batch)

    opt.zero_grad()
    loss, micro_batches = forward_backward(counting_task, model, opt, data(dist.rank), MICRO, "cpu", None)
    assert micro_batches == BATCH // MICRO == len(launched_at_forward), (micro_batches, launched_at_forward)
    assert abs(loss - float(classify(model, data(dist.rank)).loss)) < 1e-5, loss
    if algorithm == "mbsgd":
        assert launched_at_forward == [0] * micro_batches, launched_at_forward  # no all-reduce before the last
        assert opt.launched_buckets == opt.num_buckets  # the last backward launched them all
        opt.synchronize()
        expected = reference_grads(model, list(range(dist.size)))
    else:
        expected = reference_grads(model, [dist.rank])  # local gradients; plsgd averages parameters
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.grad, e, atol=1e-6), (algorithm, float((p.grad - e).abs().max()))
    opt.step()


def main() -> None:
    dist = Dist.init("mpi")
    assert dist.size > 1, dist
    for algorithm in ("mbsgd", "plsgd"):
        check(algorithm, dist)
    print(f"rank {dist.rank} ok", flush=True)


if __name__ == "__main__":
    main()
