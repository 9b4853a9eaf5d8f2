"""ResNet-50's parameter (gradient) shapes, derived from the torchvision architecture (He et al. 2016,
torchvision.models.resnet50: Bottleneck blocks [3, 4, 6, 3], expansion 4, stride on the 3x3 conv).
Written out here because torchvision is not a dependency; 161 tensors, 25,557,032 parameters."""

from __future__ import annotations

import math

NUM_TENSORS = 161
NUM_PARAMETERS = 25_557_032


def resnet50_shapes(num_classes: int = 1000) -> list[tuple[int, ...]]:
    """Shapes in torchvision's `model.parameters()` order (weights then BN weight, bias)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]  # conv1, bn1
    in_ch = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            out = width * 4
            shapes += [
                (width, in_ch, 1, 1),
                (width,),
                (width,),  # conv1 1x1, bn1
                (width, width, 3, 3),
                (width,),
                (width,),  # conv2 3x3, bn2
                (out, width, 1, 1),
                (out,),
                (out,),
            ]  # conv3 1x1, bn3
            if b == 0:  # downsample 1x1 + bn
                shapes += [(out, in_ch, 1, 1), (out,), (out,)]
            in_ch = out
    shapes += [(num_classes, 2048), (num_classes,)]  # fc
    return shapes


def _check() -> None:
    shapes = resnet50_shapes()
    assert len(shapes) == NUM_TENSORS, len(shapes)
    assert sum(math.prod(s) for s in shapes) == NUM_PARAMETERS


_check()
