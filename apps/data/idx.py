"""MNIST / Fashion-MNIST in the IDX format (gzip-compressed or raw), from a user path or the embedded copy."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch

from apps.data.dataset import Splits

EMBEDDED = Path(__file__).resolve().parent / "embedded"
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
NORMALIZE = {"mnist": (0.1307, 0.3081), "fashion_mnist": (0.2860, 0.3530)}


def read_idx(path: str | Path) -> np.ndarray:
    """Parse one IDX file: magic (0, 0, dtype code, ndim), big-endian dims, then the data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic {raw[:4]!r})")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = raw[4 + 4 * ndim :]
    if len(body) != expected:
        raise ValueError(f"{path}: IDX header says {dims} ({expected} bytes) but the file holds {len(body)} bytes")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _find(root: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx")):
        if (root / name).exists():
            return root / name
    return None


class ImageLabels:
    """uint8 images kept in memory, normalised per batch (uint8 costs a quarter of float32)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: float, std: float):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = torch.from_numpy(np.array(images, dtype=np.uint8)).unsqueeze(1)  # a writable copy
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (self.images[indices].float() / 255.0 - self.mean) / self.std
        return x, self.labels[indices]


def check_path(path: str | Path | None = None, **options: object) -> None:
    """What load() needs on disk, checked without reading it (before any rank starts)."""
    root = Path(path) if path else EMBEDDED
    if not root.is_dir():
        raise FileNotFoundError(f"data.path={str(root)!r} is not a directory holding IDX files")
    pairs = [(_find(root, f"{s}-images-idx3-ubyte"), _find(root, f"{s}-labels-idx1-ubyte")) for s in ("train", "t10k")]
    if not any(x and y for x, y in pairs):
        raise FileNotFoundError(
            f"no IDX files in {root}: expected train-images-idx3-ubyte[.gz] and "
            "train-labels-idx1-ubyte[.gz] (and/or the t10k-* pair)"
        )


def load(path: str | Path | None = None, variant: str = "mnist", eval_count: int = 2000, split_seed: int = 0) -> Splits:
    """Official train/t10k split when the train files are in `path`; otherwise only the t10k files
    (the embedded default) split eval_count / rest with a fixed seed."""
    if variant not in NORMALIZE:
        raise ValueError(f"variant must be one of {sorted(NORMALIZE)}, got {variant!r}")
    check_path(path)
    root = Path(path) if path else EMBEDDED
    mean, std = NORMALIZE[variant]
    test_x, test_y = _find(root, "t10k-images-idx3-ubyte"), _find(root, "t10k-labels-idx1-ubyte")
    train_x, train_y = _find(root, "train-images-idx3-ubyte"), _find(root, "train-labels-idx1-ubyte")
    info = {"in_channels": 1, "image_size": 28, "num_classes": 10, "in_features": 784}
    if train_x and train_y:
        train = ImageLabels(read_idx(train_x), read_idx(train_y), mean, std)
        held = ImageLabels(read_idx(test_x), read_idx(test_y), mean, std) if test_x and test_y else None
        return Splits(train, held, info)
    images, labels = read_idx(test_x), read_idx(test_y)
    if not 0 < eval_count < len(labels):
        raise ValueError(f"eval_count must be in (0, {len(labels)}), got {eval_count}")
    perm = np.random.default_rng(split_seed).permutation(len(labels))
    ev, tr = perm[:eval_count], perm[eval_count:]
    return Splits(ImageLabels(images[tr], labels[tr], mean, std), ImageLabels(images[ev], labels[ev], mean, std), info)
