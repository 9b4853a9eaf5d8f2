"""ResNets: the CIFAR family (ResNet-20/32/44/56, He et al. 2016, option-A shortcuts) and the ImageNet
bottleneck family (ResNet-50/101/152; parameter names as torchvision's so its weights load). Pipeline
stages: the residual blocks, the stem first and the pooled classifier last."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from apps.models.parts import Part


def _cifar_stem(m: Any, x: torch.Tensor) -> torch.Tensor:
    return F.relu(m.bn1(m.conv1(x)))


def _imagenet_stem(m: Any, x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(F.relu(m.bn1(m.conv1(x))), 3, 2, 1)


def _classify(m: Any, x: torch.Tensor) -> torch.Tensor:
    return m.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = cout - cin  # option A: identity shortcut, subsampled and zero-padded in channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class CifarResNet(nn.Module):
    def __init__(self, depth: int = 20, num_classes: int = 10, width: int = 16, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"depth must be 6n+2 (20, 32, 44, 56, 110), got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(n):
                blocks.append(_BasicBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _classify(self, self.layers(_cifar_stem(self, x)))

    def pipeline_layers(self) -> nn.Sequential:
        return nn.Sequential(
            Part(_cifar_stem, conv1=self.conv1, bn1=self.bn1), *self.layers, Part(_classify, fc=self.fc)
        )


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


BOTTLENECK_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


class ResNet(nn.Module):
    """ImageNet ResNet-50/101/152 (QSR's recipe uses ResNet-152)."""

    def __init__(self, depth: int = 50, num_classes: int = 1000, in_channels: int = 3, zero_init_residual: bool = True):
        super().__init__()
        if depth not in BOTTLENECK_DEPTHS:
            raise ValueError(f"depth must be one of {sorted(BOTTLENECK_DEPTHS)}, got {depth}")
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (width, blocks, stride) in enumerate(zip((64, 128, 256, 512), BOTTLENECK_DEPTHS[depth], (1, 2, 2, 2))):
            layer = []
            for b in range(blocks):
                layer.append(_Bottleneck(cin, width, stride if b == 0 else 1))
                cin = width * _Bottleneck.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if zero_init_residual and isinstance(m, _Bottleneck):
                nn.init.zeros_(m.bn3.weight)  # each block starts as identity: helps large-batch training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer4(self.layer3(self.layer2(self.layer1(_imagenet_stem(self, x)))))
        return _classify(self, x)

    def pipeline_layers(self) -> nn.Sequential:
        blocks = [b for i in range(1, 5) for b in getattr(self, f"layer{i}")]
        return nn.Sequential(Part(_imagenet_stem, conv1=self.conv1, bn1=self.bn1), *blocks, Part(_classify, fc=self.fc))
