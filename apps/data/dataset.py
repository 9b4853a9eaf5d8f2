"""The dataset protocol the training loop uses: a length and a batch fetch by indices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol

import torch


class Dataset(Protocol):
    def __len__(self) -> int: ...

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


@dataclass
class Splits:
    train: Dataset
    eval: Dataset | None
    info: dict[str, Any] = field(default_factory=dict)  # sizes models can take (num_classes, vocab_size, ...)


class _BatchView(torch.utils.data.Dataset):
    """Lets a DataLoader's workers call dataset.batch(indices) for each list of indices."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __getitem__(self, indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.dataset.batch(indices)


def iterate(
    dataset: Dataset, index_batches: Iterable[torch.Tensor], num_workers: int = 0
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Yield batches in the given order; with workers, fetched in background processes (same order)."""
    if num_workers <= 0:
        for idx in index_batches:
            yield dataset.batch(idx)
        return
    yield from torch.utils.data.DataLoader(
        _BatchView(dataset),
        sampler=list(index_batches),
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=False,
    )
