"""The MNIST convergence problem of the LAP/LPP tests: the t10k IDX files in shared/data, split
8,000 train / 2,000 eval with a fixed seed, normalised."""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

DATA = Path(os.environ.get("PYCOMM_MNIST", "/work/shared/data/mnist"))


def available() -> bool:
    return (DATA / "t10k-images-idx3-ubyte.gz").exists() and (DATA / "t10k-labels-idx1-ubyte.gz").exists()


def _idx(path: Path, header: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read()[header:], dtype=np.uint8)


def load(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    images = _idx(DATA / "t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    labels = _idx(DATA / "t10k-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x = (torch.from_numpy(images.copy()).float() / 255.0 - 0.1307) / 0.3081
    y = torch.from_numpy(labels)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    train, held = order[:8000], order[8000:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[held], y[held])


@torch.no_grad()
def accuracy(model: torch.nn.Module, data: TensorDataset) -> float:
    model.eval()
    x, y = data.tensors
    return (model(x).argmax(1) == y).float().mean().item()
