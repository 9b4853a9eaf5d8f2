"""Datasets by name: each loader returns Splits(train, eval, info)."""
from __future__ import annotations

import functools

from apps.data import cifar, idx, imagefolder, random_tensors, text
from apps.data.base import Dataset, Splits, iterate
from apps.data.sharding import ShardPlan
from apps.registry import Registry

DATASETS: Registry[Splits] = Registry("dataset")
DATASETS.add("mnist", idx.load)               # path=None: the embedded MNIST (t10k, split 8,000 / 2,000)
DATASETS.add("fashion_mnist", functools.partial(idx.load, variant="fashion_mnist"))
DATASETS.add("cifar10", cifar.load)
DATASETS.add("text", text.load)
DATASETS.add("random", random_tensors.load)   # the training stub's random tensors
DATASETS.add("imagefolder", imagefolder.load)

__all__ = ["DATASETS", "Dataset", "Splits", "ShardPlan", "iterate"]
