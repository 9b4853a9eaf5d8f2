"""The MNIST problem of the convergence tests and the algorithm benchmarks: the IDX files in shared/data
(10,000 images, split 8,000 / 2,000 with a fixed seed), a tiny CNN, each rank's batches and the eval
accuracy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from apps.data.idx import NORMALIZE, read_idx
from benchmarks.benchmark_settings import MNIST_ENV
from pycomm import settings

DATA = Path(settings.get(MNIST_ENV) or Path(__file__).resolve().parents[1].parent / "shared/data/mnist")
if not DATA.exists():  # a checkout without ../shared: the copy the app embeds (same files)
    DATA = Path(__file__).resolve().parents[1] / "apps/data/embedded"


def split(
    seed: int = 0, train: int = 8000
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    images = read_idx(DATA / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(DATA / "t10k-labels-idx1-ubyte.gz")
    mean, std = NORMALIZE["mnist"]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).sub_(mean).div_(std).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    tr, ev = order[:train], order[train:]
    return (x[tr], y[tr]), (x[ev], y[ev])


class TinyCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 5)  # 28 -> 24 -> pool 12
        self.conv2 = torch.nn.Conv2d(8, 16, 5)  # 12 -> 8 -> pool 4
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def shard_batches(n_train: int, rank: int, size: int, batch: int, epoch: int, seed: int = 1) -> list[torch.Tensor]:
    """This rank's index batches for one epoch: a seeded shuffle, dealt rank-strided (equal counts)."""
    order = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    per_rank = n_train // size
    mine = order[rank * per_rank : (rank + 1) * per_rank]
    return [mine[i : i + batch] for i in range(0, per_rank - batch + 1, batch)]


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    correct = sum(int((model(x[i : i + 500]).argmax(1) == y[i : i + 500]).sum()) for i in range(0, len(y), 500))
    model.train()
    return correct / len(y)
