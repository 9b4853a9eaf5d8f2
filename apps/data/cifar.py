"""CIFAR-10 in the binary format (cifar-10-batches-bin: records of 1 label byte + 3072 pixel bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from apps.data.dataset import Splits

RECORD = 1 + 3 * 32 * 32
MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)


def read_batches(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    chunks = []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size == 0 or raw.size % RECORD:
            raise ValueError(f"{f}: size {raw.size} is not a multiple of the {RECORD}-byte CIFAR-10 record")
        chunks.append(raw.reshape(-1, RECORD))
    data = np.concatenate(chunks)
    labels = data[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise ValueError(f"{files}: label {labels.max()} out of range 0..9 (is this CIFAR-100?)")
    return data[:, 1:].reshape(-1, 3, 32, 32), labels


class Cifar:
    """uint8 images in memory; train batches get the standard pad-4 random crop + horizontal flip,
    drawn from torch's global RNG (the loop seeds it per step, so runs are reproducible)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool):
        self.images = torch.from_numpy(np.ascontiguousarray(images))
        self.labels = torch.from_numpy(labels)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (self.images[indices].float() / 255.0 - MEAN) / STD
        if self.augment:
            n = x.shape[0]
            padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
            dx, dy = torch.randint(0, 9, (2, n)).tolist()
            x = torch.stack([padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32] for i in range(n)])
            flip = torch.rand(n) < 0.5
            x[flip] = x[flip].flip(-1)
        return x, self.labels[indices]


def check_path(path: str | Path | None, **options: object) -> None:
    """What load() needs on disk, checked without reading it (before any rank starts)."""
    if not path:
        raise ValueError("data.path must point at the cifar-10-batches-bin folder for data.name=cifar10")
    if not sorted(Path(path).glob("data_batch_*.bin")):
        raise FileNotFoundError(f"no data_batch_*.bin in {path} (expected CIFAR-10 binary version)")


def load(path: str | Path, augment: bool = True) -> Splits:
    check_path(path)
    root = Path(path)
    train_files = sorted(root.glob("data_batch_*.bin"))
    test = root / "test_batch.bin"
    info = {"in_channels": 3, "image_size": 32, "num_classes": 10}
    held = Cifar(*read_batches([test]), augment=False) if test.exists() else None
    return Splits(Cifar(*read_batches(train_files), augment=augment), held, info)
