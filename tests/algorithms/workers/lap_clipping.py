"""Rank worker (1 rank): LAP/LPP workers clip each step's gradients to `max_grad_norm` (what apps.train's
train.grad_clip passes). With x = y = 1 every gradient coordinate is exactly 1 (norm sqrt(8)), so after
S steps of one worker each coordinate moved by exactly S * lr * max_norm / sqrt(8)."""

from __future__ import annotations

import math

import pytest
import torch

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, linear_loss
from tests.algorithms.test_lap_workers import LR, ones_dataset

STEPS, MAX_NORM = 6, 0.5


def moved(algorithm: str, max_norm: float | None) -> torch.Tensor:
    model = Scale()
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), algorithm=algorithm, comm=pycomm.world(), num_processes=1
    )
    opt.train(model, linear_loss, ones_dataset(), steps=STEPS, batch_size=4, max_grad_norm=max_norm)
    return -model.w.detach().clone()


def main() -> None:
    torch.set_num_threads(1)
    pycomm.init()
    for algorithm in ("lapsgd", "lppsgd"):
        want = STEPS * LR * MAX_NORM / math.sqrt(8)
        got = moved(algorithm, MAX_NORM)
        assert torch.allclose(got, torch.full_like(got, want), rtol=1e-5), (algorithm, got, want)
        unclipped = moved(algorithm, None)
        assert torch.allclose(unclipped, torch.full_like(got, STEPS * LR)), (algorithm, unclipped)
        model = Scale()
        opt = algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), algorithm=algorithm, comm=pycomm.world(), num_processes=1
        )
        for bad in (0.0, -1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="max_grad_norm"):
                opt.train(model, linear_loss, ones_dataset(), steps=1, max_grad_norm=bad)
        print(f"{algorithm}: clipped steps moved each weight by {float(got[0]):.6g} (want {want:.6g})", flush=True)


if __name__ == "__main__":
    main()
