"""QSR's sequence of averaging rounds under real LR schedules, stepped after `opt.step()` as a training
loop does, against a reference written from docs/algorithms.md's rule: H is chosen at t = 0 and after each
round at t steps taken, from the rate of step t + 1 (the published code's scheduler has already
advanced when it recomputes H)."""

from __future__ import annotations

import math
from typing import Callable

import pytest
import torch

import algorithms

Schedule = Callable[[int], float]  # 0-based step index -> learning rate of that step


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    import pycomm

    pycomm.init()


def warmup_cosine(peak: float, warmup: int, total: int) -> Schedule:
    """The published XCosineScheduler with final_lr = 0: linear from 0, then a half cosine to 0 at `total`."""

    def lr(s: int) -> float:
        if s < warmup:
            return s * peak / warmup
        return 0.5 * peak * (1 + math.cos(min(s - warmup, total - warmup) / (total - warmup) * math.pi))

    return lr


def warmup_multistep(peak: float, warmup: int, milestones: list[int], factor: float) -> Schedule:
    def lr(s: int) -> float:
        if s < warmup:
            return s * peak / warmup
        return peak * factor ** sum(s >= m for m in milestones)

    return lr


def reference_round_ends(
    lr: Schedule, steps: int, h_base: int, alpha: float, gamma: float, h_min: int, warmup: int, total: int | None
) -> list[int]:
    """Steps after which a round averages, within `steps` steps, by the rule's text."""
    ends, t = [], 0
    while t < steps:
        if t < warmup or alpha == 0:
            h = h_base
        else:
            h = max(math.floor((alpha / lr(t)) ** gamma), h_min)
            if total is not None:
                h = min(h, total - t)
            h = max(h, 1)
        t += h
        if t <= steps:
            ends.append(t)
    return ends


def pycomm_round_ends(
    lr: Schedule, steps: int, algorithm: str = "qsr", **options
) -> tuple[list[int], list[tuple[int, int]]]:
    """Round ends of a real QSR run (or another `algorithm` taking QSR's period rule) with a LambdaLR
    stepped after opt.step(), and (t, current_period) read after each round once the scheduler has moved
    (what a loop logging H sees)."""
    peak = max(lr(s) for s in range(steps + 1))
    x = torch.zeros(3, requires_grad=True)
    opt = algorithms.CommOptimizer(torch.optim.SGD([x], lr=peak), algorithm=algorithm, **options)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr(s) / peak)
    ends, periods = [], []
    for t in range(1, steps + 1):
        x.grad = torch.ones_like(x)
        rounds = opt.rounds
        opt.step()
        scheduler.step()
        if opt.rounds > rounds:
            ends.append(t)
            if t < steps:
                periods.append((t, opt.current_period))
    return ends, periods


CASES = {
    # the published code's figures: 2000-step warm-up + cosine, no total_steps cap
    "warmup-cosine": (
        warmup_cosine(0.1, 100, 2000),
        2000,
        {"h_base": 4, "alpha": 0.2, "gamma": 2.0, "warmup_steps": 100},
    ),
    "warmup-cosine-capped": (
        warmup_cosine(0.1, 100, 2000),
        2000,
        {"h_base": 4, "alpha": 0.2, "warmup_steps": 100, "total_steps": 2000, "h_min": 1},
    ),
    "cosine": (warmup_cosine(0.1, 0, 1200), 1200, {"h_base": 4, "alpha": 0.35, "h_min": 2, "total_steps": 1200}),
    "multistep": (warmup_multistep(0.1, 0, [150, 300], 0.5), 450, {"h_base": 4, "alpha": 0.25, "h_min": 2}),
    "warmup-multistep": (
        warmup_multistep(0.1, 40, [150, 300], 0.5),
        450,
        {"h_base": 3, "alpha": 0.25, "gamma": 1.5, "warmup_steps": 40},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_round_ends_follow_the_rule_with_the_next_steps_rate(name: str) -> None:
    lr, steps, options = CASES[name]
    want = reference_round_ends(
        lr,
        steps,
        options["h_base"],
        options["alpha"],
        options.get("gamma", 2.0),
        options.get("h_min", options["h_base"]),
        options.get("warmup_steps", 0),
        options.get("total_steps"),
    )
    got, periods = pycomm_round_ends(lr, steps, **options)
    assert len(want) > 20
    assert got == want, next(
        f"round {i + 1}: pycomm ends it at step {g}, the rule at {w}"
        for i, (g, w) in enumerate(zip(got + [None] * len(want), want))
        if g != w
    )
    for t, h in periods:  # H read between a round and the next step is that next period
        assert t + h in want or t + h > steps, (t, h)


def test_the_published_codes_figures() -> None:
    """The 2000-step check: the published code's last round lands at step 1822 (1771 with the
    rate of the step just taken); the first period after warm-up is 4 (rate 0.1 at step 101)."""
    lr, steps, options = CASES["warmup-cosine"]
    ends, _ = pycomm_round_ends(lr, steps, **options)
    assert ends[-1] == 1822
    assert ends[ends.index(100) + 1] == 104


def test_first_period_comes_from_the_rule_without_warmup() -> None:
    lr, steps, options = CASES["cosine"]
    ends, _ = pycomm_round_ends(lr, 20, **options)
    assert ends[0] == 12 != options["h_base"]  # floor((0.35 / 0.1) ** 2)


def test_h_min_defaults_to_h_base() -> None:
    opt = algorithms.QSR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), h_base=6, alpha=0.1)
    assert opt.options["h_min"] == 6
