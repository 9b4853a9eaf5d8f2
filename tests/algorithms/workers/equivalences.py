"""The equivalences that must hold exactly (docs/architecture.md, "How it is tested") on real ranks.
Usage: equivalences OUT_DIR"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from tests.algorithms.problem import batch, loss_on, make_inner, make_model
from tests.algorithms.workers.common import build, max_diff, run_cases, train, world

STEPS, TOL = 10, 1e-6


def concatenated_batch_sgd(comm: Any, inner: str) -> list[list[torch.Tensor]]:
    """One process, batch N*b: every rank's batch of each step concatenated."""
    model = make_model(seed=1)
    opt = make_inner(inner, model.parameters())
    out = []
    for t in range(STEPS):
        xs, ys = zip(*(batch(r, t) for r in range(comm.size)))
        opt.zero_grad()
        F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
        out.append([v.detach().clone() for v in model.state_dict().values()])
    return out


def local_sgd(comm: Any, inner: str) -> list[list[torch.Tensor]]:
    """This rank alone, from rank 0's initial model, on its own batches: no communication."""
    model = make_model(seed=1)
    opt = make_inner(inner, model.parameters())
    out = []
    for t in range(STEPS):
        opt.zero_grad()
        loss_on(model, comm.rank, t).backward()
        opt.step()
        out.append([v.detach().clone() for v in model.state_dict().values()])
    return out


def wrapped(comm: Any, algorithm: str, inner: str, **options: Any) -> list[list[torch.Tensor]]:
    model, opt = build(comm, algorithm, options, inner, batchnorm=False)
    return train(comm, model, opt, 0, STEPS, schedule=False)


def mbsgd_overlapped_and_accumulated(comm: Any) -> list[list[torch.Tensor]]:
    """mbsgd where each step is two half-batch backward passes, the first under no_sync(); checks that
    the buckets' all-reduces start during backward (hooks), not in step()."""
    model, opt = build(comm, "mbsgd", {"bucket_bytes": 1}, "momentum", batchnorm=False)
    assert opt.num_buckets == 4, opt.num_buckets  # one per parameter
    out = []
    for t in range(STEPS):
        x, y = batch(comm.rank, t)
        half = len(y) // 2
        opt.zero_grad()
        with opt.no_sync():
            (0.5 * F.cross_entropy(model(x[:half]), y[:half])).backward()
        assert opt.launched_buckets == 0, "no_sync() launched an all-reduce"
        (0.5 * F.cross_entropy(model(x[half:]), y[half:])).backward()
        assert opt.launched_buckets == opt.num_buckets, (
            f"only {opt.launched_buckets} of {opt.num_buckets} buckets started during backward"
        )
        opt.step()
        out.append([v.detach().clone() for v in model.state_dict().values()])
    try:  # accumulating again after the all-reduce started is refused, not silently wrong
        loss_on(model, comm.rank, 0).backward()
        loss_on(model, comm.rank, 1).backward()
        raise AssertionError("a second backward without no_sync() was accepted")
    except RuntimeError as e:
        assert "no_sync" in str(e), e
    opt.zero_grad()
    return out


CASES: dict[str, Callable[[Any], tuple[list, list]]] = {
    "mbsgd-no_sync-overlap==concatenated-batch-sgd": lambda c: (
        mbsgd_overlapped_and_accumulated(c),
        concatenated_batch_sgd(c, "momentum"),
    ),
    "mbsgd==concatenated-batch-sgd": lambda c: (wrapped(c, "mbsgd", "momentum"), concatenated_batch_sgd(c, "momentum")),
    "mbsgd-small-buckets==concatenated-batch-sgd": lambda c: (
        wrapped(c, "mbsgd", "sgd", bucket_bytes=64),
        concatenated_batch_sgd(c, "sgd"),
    ),
    "plsgd-H1==mbsgd": lambda c: (wrapped(c, "plsgd", "sgd", averaging_freq=1), wrapped(c, "mbsgd", "sgd")),
    "plsgd-prepost==mbsgd": lambda c: (
        wrapped(c, "plsgd", "sgd", averaging_freq=5, pre_post_steps=STEPS),
        wrapped(c, "mbsgd", "sgd"),
    ),
    "qsr-alpha0==plsgd-Hbase": lambda c: (
        wrapped(c, "qsr", "momentum", h_base=3, alpha=0.0),
        wrapped(c, "plsgd", "momentum", averaging_freq=3),
    ),
    # X <- X - 1 * mean_i (X - x_i) = mean_i x_i: the outer step of plain SGD at lr 1 is plsgd's average
    "diloco-outer-sgd-lr1==plsgd": lambda c: (
        wrapped(c, "diloco", "adamw", inner_steps=3, outer_lr=1.0, outer_momentum=0.0),
        wrapped(c, "plsgd", "adamw", averaging_freq=3),
    ),
    "easgd-zero==local-sgd": lambda c: (
        wrapped(c, "easgd", "momentum", comm_period=2, dist_pulling_strength=0.0, local_pulling_strength=0.0),
        local_sgd(c, "momentum"),
    ),
}


def compare(comm: Any, run: Callable[[Any], tuple[list, list]]) -> dict[str, Any]:
    got, want = run(comm)
    diff = max(max_diff(g, w) for g, w in zip(got, want))
    moved = max_diff(got[-1], got[0])
    return {"ok": diff <= TOL and moved > 0, "max_diff": diff, "moved": moved}


def cases(comm: Any) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    return [(name, lambda run=run: compare(comm, run)) for name, run in CASES.items()]


def main() -> None:
    comm = world()
    run_cases(comm, cases(comm))


if __name__ == "__main__":
    main()
