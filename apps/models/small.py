"""Small MNIST-sized models: an MLP and a LeNet-like CNN (fast on one CPU core); both are sequences of
layers, which pipeline_layers() gives for pipeline stages."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int = 784, hidden: Sequence[int] = (256, 128), num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def pipeline_layers(self) -> nn.Sequential:
        return self.net


class SmallCNN(nn.Module):
    """Two 5x5 conv layers + two linear layers; about 97-98% on the embedded MNIST split in a few epochs."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 16, image_size: int = 28):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * side * side, 128), nn.ReLU(), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def pipeline_layers(self) -> nn.Sequential:
        return nn.Sequential(*self.features, *self.classifier)
