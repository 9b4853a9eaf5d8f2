"""A Vision Transformer (Dosovitskiy et al. 2021): patch embedding, class token, pre-norm blocks.
Defaults give a small ViT for 32x32 images; QSR's ViT-B/16 is image_size=224, patch_size=16,
dim=768, depth=12, heads=12. Pipeline stages: the blocks, the embedding first and the head last."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from apps.models.parts import Part
from apps.models.transformer import Block


def _embed(m: Any, x: torch.Tensor) -> torch.Tensor:
    x = m.patch(x).flatten(2).transpose(1, 2)
    return torch.cat([m.cls.expand(x.shape[0], -1, -1), x], dim=1) + m.pos


def _classify(m: Any, x: torch.Tensor) -> torch.Tensor:
    return m.head(m.norm(x)[:, 0])


class ViT(nn.Module):
    def __init__(
        self,
        image_size: int = 32,
        patch_size: int = 4,
        in_channels: int = 3,
        num_classes: int = 10,
        dim: int = 192,
        depth: int = 6,
        heads: int = 3,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be divisible by patch_size ({patch_size})")
        n_patches = (image_size // patch_size) ** 2
        self.patch = nn.Conv2d(in_channels, dim, patch_size, patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n_patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _classify(self, self.blocks(_embed(self, x)))

    def pipeline_layers(self) -> nn.Sequential:
        """[patch embedding + class token + positions, the blocks, norm + head on the class token]."""
        return nn.Sequential(
            Part(_embed, patch=self.patch, cls=self.cls, pos=self.pos),
            *self.blocks,
            Part(_classify, norm=self.norm, head=self.head),
        )
