"""maxie's random-tensor dataset: checks the pipeline (data, model, checkpoints, segments)
without real data. Sample i is a pure function of (seed, i), so every rank and every resume agrees."""

from __future__ import annotations

from typing import Sequence

import torch

from apps.data.dataset import Splits


class RandomTensors:
    def __init__(self, num_samples: int, shape: Sequence[int], num_classes: int, seed: int):
        self.num_samples, self.shape, self.num_classes, self.seed = num_samples, tuple(shape), num_classes, seed

    def __len__(self) -> int:
        return self.num_samples

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
        xs, ys = [], []
        for i in indices.tolist():
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
            xs.append(torch.randn(self.shape, generator=g))
            ys.append(torch.randint(0, max(self.num_classes, 1), (), generator=g))
        x = torch.stack(xs)
        return (x, torch.stack(ys)) if self.num_classes else (x,)


def load(
    num_samples: int = 1024,
    eval_samples: int = 128,
    shape: Sequence[int] = (1, 224, 224),
    num_classes: int = 0,
    seed: int = 0,
) -> Splits:
    """num_classes=0 gives images only (for the masked autoencoder); > 0 adds random labels."""
    if num_samples <= 0 or eval_samples < 0:
        raise ValueError(f"num_samples must be > 0 and eval_samples >= 0, got {num_samples}, {eval_samples}")
    info = {"in_channels": shape[0], "image_size": shape[-1], "num_classes": num_classes}
    held = RandomTensors(eval_samples, shape, num_classes, seed + 1) if eval_samples else None
    return Splits(RandomTensors(num_samples, shape, num_classes, seed), held, info)
