"""Rank worker (1 rank, 2 worker processes): every node minibatch k is applied at the rate of the
schedule at the fractional epoch k / len(loader), however late the main process polls. With `Scale`,
ones and `linear_loss` each update is -lr * 1, so the model ends at minus the sum of the rates used;
the reference sums a cosine written here from the rule, not taken from the scheduler. The check is
exact, so Hogwild's rare lost update (the two workers' lock-free `add_` on the same floats at the same
instant) fails it too: the test (test_lapsgd.py) runs this again then."""

from __future__ import annotations

import math

import torch

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, paced_linear_loss
from tests.algorithms.test_lap_workers import ones_dataset

PEAK, EPOCHS, PER_EPOCH = 0.25, 3, 8  # 64 items, batches of 8


def rate(k: int) -> float:
    """CosineAnnealingLR(T_max=EPOCHS) at epoch k / PER_EPOCH, from its formula."""
    return PEAK * 0.5 * (1 + math.cos(math.pi * (k / PER_EPOCH) / EPOCHS))


def main() -> None:
    pycomm.init()
    model = Scale()
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=PEAK), algorithm="lapsgd", comm=pycomm.world(), num_processes=2
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt.optimizer, T_max=EPOCHS)  # written in epochs
    # a slow poll: without per-minibatch rates the workers would run several minibatches on a stale one
    opt.train(model, paced_linear_loss, ones_dataset(64), epochs=2, batch_size=8, scheduler=sched, poll_interval=0.05)
    want = -sum(rate(k) for k in range(2 * PER_EPOCH))
    assert torch.allclose(model.w.detach(), torch.full_like(model.w, want), rtol=1e-5, atol=0), (model.w, want)
    # a second call goes on from node minibatch 16
    opt.train(
        model, paced_linear_loss, ones_dataset(64), steps=PER_EPOCH, batch_size=8, scheduler=sched, poll_interval=0.05
    )
    want = -sum(rate(k) for k in range(EPOCHS * PER_EPOCH))
    assert torch.allclose(model.w.detach(), torch.full_like(model.w, want), rtol=1e-5, atol=0), (model.w, want)
    whole_epochs = -sum(rate(k // PER_EPOCH * PER_EPOCH) for k in range(EPOCHS * PER_EPOCH))
    assert abs(whole_epochs - want) > 100 * 1e-5 * abs(want)  # the rule is distinguishable from the old one
    print("lap schedule ok", flush=True)


if __name__ == "__main__":
    main()
