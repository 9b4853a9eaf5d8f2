"""Rank worker (1 rank, 2 worker processes): every node minibatch k is applied at the rate of the
schedule at the fractional epoch k / len(loader), however late the main process polls. With `Scale`,
ones and `linear_loss` each update is -lr * 1, so the model ends at minus the sum of the rates used;
the reference sums a cosine written here from the rule, not taken from the scheduler. Hogwild may lose
an update (two workers' lock-free `add_` on the same floats at the same instant), so the end value may
differ from that sum by the rates of at most two lost minibatches, and by nothing else."""
from __future__ import annotations

import itertools
import math

import torch

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, paced_linear_loss
from tests.algorithms.test_lap_workers import ones_dataset

PEAK, EPOCHS, PER_EPOCH = 0.25, 3, 8   # 64 items, batches of 8


def rate(k: int) -> float:
    """CosineAnnealingLR(T_max=EPOCHS) at epoch k / PER_EPOCH, from its formula."""
    return PEAK * 0.5 * (1 + math.cos(math.pi * (k / PER_EPOCH) / EPOCHS))


def check_model(w: torch.Tensor, steps: int) -> float:
    """Asserts every coordinate of `w` is minus the sum of the first `steps` rates, give or take the
    rates of at most two lost updates; returns the exact sum."""
    rates = [rate(k) for k in range(steps)]
    want = -sum(rates)
    lost_sums = [0.0] + [sum(c) for n in (1, 2) for c in itertools.combinations(rates, n)]
    tol = 1e-5 * abs(want)
    for x in w.detach().tolist():
        assert any(math.isclose(x - want, s, rel_tol=0, abs_tol=tol) for s in lost_sums), (x, want)
    lost = {round(x - want, 6) for x in w.detach().tolist() if abs(x - want) > tol}
    if lost:
        print(f"Hogwild lost updates worth {sorted(lost)} (rates of the schedule)", flush=True)
    return want


def main() -> None:
    pycomm.init()
    model = Scale()
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=PEAK), algorithm="lapsgd",
                                   comm=pycomm.world(), num_processes=2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt.optimizer, T_max=EPOCHS)   # written in epochs
    # a slow poll: without per-minibatch rates the workers would run several minibatches on a stale one
    opt.train(model, paced_linear_loss, ones_dataset(64), epochs=2, batch_size=8, scheduler=sched,
              poll_interval=0.05)
    check_model(model.w, 2 * PER_EPOCH)
    # a second call goes on from node minibatch 16
    opt.train(model, paced_linear_loss, ones_dataset(64), steps=PER_EPOCH, batch_size=8, scheduler=sched,
              poll_interval=0.05)
    want = check_model(model.w, EPOCHS * PER_EPOCH)
    # The rule is distinguishable from the old one (a rate per whole epoch), lost updates or not.
    old_rates = [rate(k // PER_EPOCH * PER_EPOCH) for k in range(EPOCHS * PER_EPOCH)]
    old = torch.full_like(model.w, -sum(old_rates))
    for lost in [0.0, *old_rates, *(a + b for a, b in itertools.combinations(old_rates, 2))]:
        try:
            check_model(old + lost, EPOCHS * PER_EPOCH)
        except AssertionError:
            continue
        raise AssertionError(f"the whole-epoch schedule ({old[0] + lost}) passes check_model; want {want}")
    print("lap schedule ok", flush=True)


if __name__ == "__main__":
    main()
