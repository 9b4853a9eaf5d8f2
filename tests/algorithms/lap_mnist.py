"""The MNIST convergence problem of the LAP/LPP tests as TensorDatasets (what LAP's workers sample
from): the same 8,000 / 2,000 split as tests/algorithms/mnist.py, which it reuses."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from tests.algorithms import mnist


def available() -> bool:
    return all((mnist.DATA / f"t10k-{kind}-idx{n}-ubyte.gz").exists() for kind, n in (("images", 3), ("labels", 1)))


def load(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    (x_train, y_train), (x_eval, y_eval) = mnist.split(seed)
    return TensorDataset(x_train, y_train), TensorDataset(x_eval, y_eval)


def accuracy(model: torch.nn.Module, data: TensorDataset) -> float:
    return mnist.accuracy(model, *data.tensors)
