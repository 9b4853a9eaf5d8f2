"""LARS against the formula of docs/algorithms.md written out by hand; the LR schedules' values."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms import LARS, Constant, CosineWithWarmup, MultiStep


def reference_lars(
    w: torch.Tensor, grads: list[torch.Tensor], lr: float, m: float, wd: float, eta: float, excluded: bool
) -> torch.Tensor:
    w, buf = w.clone().double(), torch.zeros_like(w, dtype=torch.float64)
    for g in grads:
        g = g.double()
        if excluded:
            local_lr, decay = 1.0, 0.0
        else:
            wn, gn = w.norm().item(), g.norm().item()
            local_lr, decay = (1.0 if wn == 0 or gn == 0 else eta * wn / (gn + wd * wn)), wd
        buf = m * buf + lr * local_lr * (g + decay * w)
        w = w - buf
    return w


@pytest.mark.parametrize("shape, exclude", [((5, 3), True), ((4,), True), ((4,), False), ((2, 3, 2), False)])
def test_lars_matches_formula(shape: tuple[int, ...], exclude: bool) -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(shape))
    grads = [torch.randn(shape) for _ in range(4)]
    want = reference_lars(p.detach(), grads, lr=0.5, m=0.9, wd=0.01, eta=0.02, excluded=exclude and len(shape) <= 1)
    opt = LARS([p], lr=0.5, momentum=0.9, weight_decay=0.01, trust_coefficient=0.02, exclude_bias_and_norm=exclude)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    torch.testing.assert_close(p.detach().double(), want, atol=1e-6, rtol=1e-6)


def test_lars_zero_gradient_uses_unit_trust_ratio() -> None:
    p = torch.nn.Parameter(torch.ones(3, 3))
    p.grad = torch.zeros(3, 3)
    LARS([p], lr=0.1, momentum=0.0, weight_decay=0.0).step()
    torch.testing.assert_close(p.detach(), torch.ones(3, 3))


def test_lars_rejects_bad_hyperparameters() -> None:
    p = [torch.nn.Parameter(torch.ones(2))]
    with pytest.raises(ValueError, match="momentum"):
        LARS(p, lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="trust_coefficient"):
        LARS(p, lr=0.1, trust_coefficient=0.0)


def lrs(scheduler_factory, steps: int, lr: float = 1.0) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = scheduler_factory(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_cosine_with_warmup() -> None:
    got = lrs(lambda o: CosineWithWarmup(o, total_steps=10, warmup_steps=4, baseline_lr=0.2, min_lr=0.1), 12)
    want = (
        [0.2 + 0.8 * s / 4 for s in range(4)]
        + [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 6)) for s in range(4, 11)]
        + [0.1]
    )
    assert got == pytest.approx(want)


def test_multistep_and_constant() -> None:
    assert lrs(lambda o: MultiStep(o, milestones=[2, 4], gamma=0.5), 6) == pytest.approx([1, 1, 0.5, 0.5, 0.25, 0.25])
    assert lrs(Constant, 3, lr=0.3) == pytest.approx([0.3] * 3)


def test_schedules_accept_a_wrapper_and_reject_others() -> None:
    class Wrapper:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)

    assert CosineWithWarmup(Wrapper(), total_steps=5).optimizer is Wrapper.optimizer
    with pytest.raises(TypeError, match="optimizer must be a torch optimizer or a CommOptimizer"):
        Constant(object())
