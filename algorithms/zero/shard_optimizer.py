"""The torch optimizer that steps this rank's shard: the user's optimizer class and hyper-parameters,
built over the shard pieces (algorithms/zero/flat_group.py), one piece per user parameter in the user's
order. The user's optimizer stays what schedulers and the training loop see (its `param_groups`); its
hyper-parameters are copied onto the shard optimizer's groups before every step, so an LR scheduler,
or a hand-written `g["lr"] = ...`, takes effect as it would without sharding."""

from __future__ import annotations

import inspect
from typing import Any

import torch


def build(user: torch.optim.Optimizer, piece_of: dict[int, torch.nn.Parameter]) -> torch.optim.Optimizer:
    """An optimizer of the user's class over the pieces; `piece_of[id(p)]` is parameter p's piece."""
    groups = [{**hyper_parameters(g), "params": [piece_of[id(p)] for p in g["params"]]} for g in user.param_groups]
    accepted = inspect.signature(type(user).__init__).parameters
    try:
        shard = type(user)(groups, **{k: v for k, v in user.defaults.items() if k in accepted})
    except TypeError as e:
        raise TypeError(
            f"ZeRO builds a {type(user).__name__} over the shard with the same defaults and "
            f"param_groups and could not: {e}"
        ) from e
    shard.defaults = dict(user.defaults)
    return shard


def hyper_parameters(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


def mirror(user: torch.optim.Optimizer, shard: torch.optim.Optimizer) -> None:
    """Copy the user's current hyper-parameters (lr after a scheduler step, ...) onto the shard groups."""
    for mine, theirs in zip(shard.param_groups, user.param_groups):
        for key, value in theirs.items():
            if key != "params":
                mine[key] = value
