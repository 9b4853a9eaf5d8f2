"""ImageNet-style folders (one sub-folder per class) through torchvision, an optional dependency."""

from __future__ import annotations

from pathlib import Path

import torch

from apps import requirements
from apps.data.dataset import Splits


class Folder:
    def __init__(self, root: Path, train: bool, image_size: int):
        requirements.require("data.name", "imagefolder")  # missing or built for another torch: the pinned install line
        from torchvision import datasets, transforms

        norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        tf = (
            transforms.Compose(
                [
                    transforms.RandomResizedCrop(image_size),
                    transforms.RandomHorizontalFlip(),
                    transforms.ToTensor(),
                    norm,
                ]
            )
            if train
            else transforms.Compose(
                [
                    transforms.Resize(int(image_size * 8 / 7)),
                    transforms.CenterCrop(image_size),
                    transforms.ToTensor(),
                    norm,
                ]
            )
        )
        self.folder = datasets.ImageFolder(str(root), transform=tf)

    def __len__(self) -> int:
        return len(self.folder)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        items = [self.folder[i] for i in indices.tolist()]
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


def check_path(path: str | Path | None, train_dir: str = "train", **options: object) -> None:
    """What load() needs on disk, checked without reading it (before any rank starts)."""
    if not path:
        raise ValueError(
            "data.path must point at a folder with train/ and val/ class folders for data.name=imagefolder"
        )
    if not (Path(path) / train_dir).is_dir():
        raise FileNotFoundError(f"{Path(path) / train_dir} is not a directory (data.path={str(path)!r})")


def load(path: str | Path, image_size: int = 224, train_dir: str = "train", eval_dir: str = "val") -> Splits:
    check_path(path, train_dir)
    root = Path(path)
    train = Folder(root / train_dir, True, image_size)
    held = Folder(root / eval_dir, False, image_size) if (root / eval_dir).is_dir() else None
    return Splits(train, held, {"in_channels": 3, "image_size": image_size, "num_classes": len(train.folder.classes)})
