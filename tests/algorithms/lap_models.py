"""Small models and losses for the LAP/LPP tests, at module level so spawned workers can unpickle them."""

from __future__ import annotations

import time

import torch


class Scale(torch.nn.Module):
    """out = x * w: with x = y = 1 and `linear_loss`, every step's gradient is exactly 1 per coordinate."""

    def __init__(self, n: int = 8):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


class WideSum(torch.nn.Module):
    """out = x[:, :1] * sum(w): with x = 1 and `mean_loss`, every coordinate's gradient is exactly 1, as with
    Scale, for a w as wide as wanted (one update then moves that many bytes) whatever the data's width."""

    def __init__(self, n: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * self.w.sum()


def mean_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return out.mean()


def linear_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of <out, target>: its gradient in w is the batch mean of x * target."""
    return (out * target).sum() / out.shape[0]


def paced_linear_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """linear_loss taking a few milliseconds, as a real model's step does: bare, a step is so cheap that
    a whole run fits inside one or two averaging rounds, and how close the ranks stay is then luck."""
    time.sleep(0.004)
    return linear_loss(out, target)


def failing_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    raise ArithmeticError("deliberate failure in a worker")


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 7 * 7, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))
