"""Datasets by name: each loader returns Splits(train, eval, info)."""

from __future__ import annotations

import functools

from apps.data import cifar, idx, imagefolder, random_tensors, text
from apps.data.dataset import Dataset, Splits, iterate
from apps.data.sharding import ShardPlan
from apps.name_registry import Registry

DATASETS: Registry[Splits] = Registry("dataset")
# check_path: what a dataset needs on disk, checked before any rank starts (apps/config/checks.py)
DATASETS.add("mnist", idx.load, check_path=idx.check_path)  # path=None: the embedded MNIST (t10k, 8,000 / 2,000)
DATASETS.add("fashion_mnist", functools.partial(idx.load, variant="fashion_mnist"), check_path=idx.check_path)
DATASETS.add("cifar10", cifar.load, check_path=cifar.check_path)
DATASETS.add("text", text.load, check_path=text.check_path, check=text.check_options)
DATASETS.add("random", random_tensors.load)  # maxie's random tensors (pipeline checks without data)
DATASETS.add("imagefolder", imagefolder.load, check_path=imagefolder.check_path)


def check_source(name: str, options: dict) -> None:
    """Raise FileNotFoundError / ValueError when dataset `name` would not find its files."""
    check = DATASETS.get(name).meta.get("check_path")
    if check is not None:
        check(**{"path": None, **options})  # an unset data.path is the dataset's to name, not a TypeError


__all__ = ["DATASETS", "check_source", "Dataset", "Splits", "ShardPlan", "iterate"]
