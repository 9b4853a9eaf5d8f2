"""Cutting a model into pipeline stages: contiguous runs of layers, balanced by parameter count or at
layer indices the user gives. Every stage gets at least one layer."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from torch import nn


def layers_of(model: Any) -> list[tuple[str, nn.Module]]:
    """(name, layer) of an nn.Sequential (names kept, so a stage's parameter names are the model's), or of
    a list/tuple of modules (named by position)."""
    if isinstance(model, nn.Sequential):
        layers = list(model.named_children())
    elif isinstance(model, (list, tuple, nn.ModuleList)):
        layers = [(str(i), m) for i, m in enumerate(model)]
    else:
        raise TypeError(
            f"Pipeline: model must be an nn.Sequential or a list of modules (the layers, or the "
            f"stages), got {type(model).__name__}"
        )
    bad = [name for name, m in layers if not isinstance(m, nn.Module)]
    if bad:
        raise TypeError(f"Pipeline: every layer must be an nn.Module; layer(s) {bad} are not")
    return layers


def balanced_bounds(sizes: Sequence[int], stages: int) -> list[int]:
    """Start index of each of `stages` contiguous non-empty parts of `sizes` minimising the largest part's
    sum (ties: the earliest cut), as the linear-partition dynamic programme; ends with len(sizes)."""
    n = len(sizes)
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    inf = float("inf")
    # best[k][i]: the smallest possible largest part when the first i layers form k parts
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    bounds = [n]
    for k in range(stages, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    return bounds[::-1]


def check_split(split: Any, layers: int, stages: int) -> list[int]:
    """`split` (the first layer index of stages 1..p-1; of global chunks 1..p*v-1 interleaved) as the bounds
    [0, ..., layers]."""
    if not isinstance(split, (list, tuple)) or any(isinstance(i, bool) or not isinstance(i, int) for i in split):
        raise TypeError(
            f"Pipeline: split must be a list of ints (the layer index where each stage after the "
            f"first begins), got {split!r}"
        )
    bounds = [0, *split, layers]
    if len(split) != stages - 1 or any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(
            f"Pipeline: split must hold {stages - 1} strictly increasing layer indices in "
            f"[1, {layers - 1}] for {stages} stages of {layers} layers, got {list(split)}"
        )
    return bounds


def stage_bounds(layers: list[tuple[str, nn.Module]], stages: int, split: Any = None) -> list[int]:
    """Bounds [0, b1, ..., layers] of the stages: from `split`, or balanced by parameter count."""
    if len(layers) < stages:
        raise ValueError(
            f"Pipeline: the model has {len(layers)} layers, fewer than the {stages} pipeline stages "
            f"(x chunks with interleaved_1f1b); use fewer stages (a smaller comm or a larger "
            f"data_parallel) or split the layers finer"
        )
    if split is not None:
        return check_split(split, len(layers), stages)
    sizes = [sum(p.numel() for p in m.parameters()) for _, m in layers]
    return balanced_bounds(sizes, stages)


def stage_module(layers: list[tuple[str, nn.Module]], bounds: list[int], stage: int) -> nn.Sequential:
    """The layers of `stage` as an nn.Sequential that shares the model's modules and their names."""
    return nn.Sequential(OrderedDict(layers[bounds[stage] : bounds[stage + 1]]))


def check_untied(layers: list[tuple[str, nn.Module]], bounds: list[int]) -> None:
    """Refuse a parameter held by layers of two stages (tied embeddings across the cut): each stage would
    train its own copy with half of the gradient. Tied layers on one stage are fine."""
    where: dict[int, tuple[int, str]] = {}
    for part in range(len(bounds) - 1):
        for name, layer in layers[bounds[part] : bounds[part + 1]]:
            for pname, p in layer.named_parameters():
                first = where.setdefault(id(p), (part, f"{name}.{pname}"))
                if first[0] != part:
                    raise ValueError(
                        f"Pipeline: parameter {first[1]} (stage part {first[0]}) is also "
                        f"{name}.{pname} (stage part {part}): tied parameters must sit on one stage; "
                        f"untie them (e.g. the GPT's tie_weights=False) or choose a split that keeps "
                        f"both layers on one stage"
                    )
