"""Streaming DiLoCo's fragments: the parameters cut into F groups strided over the model's layers, as
Douillard et al. (2025) do: fragment f holds layers f, f + F, f + 2F, ... (so each fragment spans the
depth of the model and fragments are about the same size when the layers are).

A layer is the run of parameters that share a module path up to its first numeric component
(`blocks.3.attn.c_attn.weight` and `blocks.3.mlp.fc.bias` are layer `blocks.3`; `tok_emb.weight` is layer
`tok_emb`; an `nn.Sequential`'s `0.weight` is layer `0`), in the optimizer's parameter order. Without a
model to name them, or for a parameter the model does not hold, each tensor is its own layer."""

from __future__ import annotations

from typing import Sequence

import torch


def layer_key(name: str) -> str:
    """The layer a parameter named `name` (as in `model.named_parameters()`) belongs to."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0] if len(parts) > 1 else name


def layers(params: Sequence[torch.Tensor], model: torch.nn.Module | None) -> list[list[int]]:
    """Indices into `params` grouped by layer, layers in the model's order (then those it does not hold, in
    order of their first parameter)."""
    named = list(model.named_parameters()) if model is not None else []
    names, depth = {id(p): n for n, p in named}, {}
    for n, _ in named:
        depth.setdefault(layer_key(n), len(depth))
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(params):
        name = names.get(id(p))
        groups.setdefault(layer_key(name) if name is not None else f"#param{i}", []).append(i)
    return [groups[k] for k in sorted(groups, key=lambda k: depth.get(k, len(depth)))]


def strided(groups: Sequence[Sequence[int]], fragments: int) -> list[list[int]]:
    """Fragment f = the indices of groups f, f + F, f + 2F, ..., sorted; every fragment non-empty (a
    ValueError naming the layer count when F exceeds it)."""
    if fragments > len(groups):
        raise ValueError(
            f"fragments={fragments} is more than the model's {len(groups)} layers "
            f"(algorithms/fragments.py says what a layer is); choose fragments <= {len(groups)}"
        )
    return [sorted(i for g in groups[f::fragments] for i in g) for f in range(fragments)]
