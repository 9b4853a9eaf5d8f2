"""The algorithm cases trained on the MNIST CNN (benchmarks/mnist_cnn.py) by the convergence tests and by
`python -m benchmarks.algorithms`: each case's algorithm, options and inner optimizer, the batch per rank
and the eval accuracy every rank must reach within MAX_EPOCHS."""

from __future__ import annotations

from typing import Any

import torch

import algorithms

TARGET, MAX_EPOCHS, BATCH = 0.95, 3, 64
SGD = {"lr": 0.05, "momentum": 0.9}

# case -> (algorithm, options, inner optimizer factory)
CASES: dict[str, tuple[str, dict[str, Any], Any]] = {
    "mbsgd": ("mbsgd", {}, lambda p: torch.optim.SGD(p, **SGD)),
    "mbsgd-lars": ("mbsgd", {}, lambda p: algorithms.LARS(p, lr=2.0, momentum=0.9, trust_coefficient=0.01)),
    "plsgd": ("plsgd", {"averaging_freq": 8, "pre_post_steps": 16}, lambda p: torch.optim.SGD(p, **SGD)),
    "qsr-sgd": ("qsr", {"h_base": 4, "alpha": 0.1, "total_steps": 186}, lambda p: torch.optim.SGD(p, **SGD)),
    "qsr-adamw": (
        "qsr",
        {"h_base": 4, "alpha": 0.008, "avg_m": True, "avg_v": True, "total_steps": 186},
        lambda p: torch.optim.AdamW(p, lr=4e-3, weight_decay=1e-4),
    ),
    "easgd": (
        "easgd",
        {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
        lambda p: torch.optim.SGD(p, **SGD),
    ),
    "easgd+": (
        "easgd+",
        {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
        lambda p: torch.optim.SGD(p, **SGD),
    ),
    "lsgd": (
        "lsgd",
        {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
        lambda p: torch.optim.SGD(p, **SGD),
    ),
    "lsgd+": (
        "lsgd+",
        {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.2},
        lambda p: torch.optim.SGD(p, **SGD),
    ),
}
