"""Which parallelisms compose, decided in one place from the classes' declarations (algorithms/traits.py
and the CommOptimizer attributes `across_shards`), never from names, so an algorithm of one's own
composes (or is refused) by what it declares. The table, with the reasons, is docs/composition.md.

- pipeline x a data-parallel method: a `wrapper` algorithm over mesh["dp"] (each stage's replicas); the
  stages run the method in lockstep (same step counter, same schedule), so the whole model follows its
  rule. Refused: algorithms with their own loop or server roles, and independent processes (one stage
  would survive another's death), and lsgd's proxy leader metric (each stage would elect its own
  leader from its own parameters: stages of different replicas would mix).
- pipeline x ZeRO 1/2/3: ZeRO over the stage's dp_shard, replicas over dp_replicate.
- ZeRO inside dp_shard x a method across dp_replicate (HSDP + local SGD): the outer algorithm wraps the
  ZeRO optimizer and runs its rule on the master shards across dp_replicate (the ranks holding the same
  shard index); ZeRO then averages nothing across replicas. Only classes declaring `across_shards`
  (plsgd, qsr, easgd) do: their rule is elementwise on the parameters and reads no gradient.

A CommOptimizer built over some parameters also *claims* them (`claim`, `claimant`): it owns their
data-parallel communication, so a Pipeline stage holding them does not average their gradients itself
and runs all but its last backward inside the claimant's `no_sync` (when it has one)."""

from __future__ import annotations

import weakref
from typing import Any, Iterable, Optional

from algorithms import traits

# id(parameter) -> (weak reference to it, to the CommOptimizer that owns its data-parallel communication);
# by id: tensors compare elementwise, so they cannot be keys of a WeakKeyDictionary
_CLAIMS: dict[int, tuple[weakref.ref, weakref.ref]] = {}


class CompositionError(ValueError):
    """A pair of parallelisms that does not compose; the message names the pair and why."""


def claim(params: Iterable[Any], opt: Any) -> None:
    owner = weakref.ref(opt)
    for p in params:
        key = id(p)
        _CLAIMS[key] = (weakref.ref(p, lambda _, k=key: _CLAIMS.pop(k, None)), owner)


def claimant(params: Iterable[Any]) -> Optional[Any]:
    """The live CommOptimizer that claimed any of `params` (the latest one to), or None."""
    for p in params:
        entry = _CLAIMS.get(id(p))
        if entry is not None and entry[0]() is p and (opt := entry[1]()) is not None:
            return opt
    return None


def _name(cls: type) -> str:
    return getattr(cls, "name", "") or cls.__name__


def check_nesting(outer: type, inner: Any) -> None:
    """`outer` wrapping the CommOptimizer `inner` (ZeRO inside dp_shard, `outer` across dp_replicate)."""
    if not hasattr(inner, "master_params"):
        raise CompositionError(
            f"{_name(outer)} over {_name(type(inner))}: only a ZeRO optimizer (zero1, zero2, zero3) "
            f"may be wrapped by another algorithm; wrap the torch optimizer once"
        )
    check_nesting_classes(outer, type(inner), getattr(inner, "options", {}))


def check_nesting_classes(outer: type, inner: type, inner_options: dict[str, Any]) -> None:
    """The same, from the classes and the inner one's options (apps check it before launch)."""
    pair = f"{_name(outer)} over {_name(inner)}"
    if getattr(inner, "state_layout", None) != traits.SHARDED:
        raise CompositionError(
            f"{pair}: only a ZeRO optimizer (zero1, zero2, zero3) may be wrapped by another "
            f"algorithm; wrap the torch optimizer once"
        )
    if _name(outer) == "mbsgd":
        raise CompositionError(
            f"{pair}: averaging gradients across dp_replicate is what {_name(inner)} itself does "
            "on a Mesh with dp_replicate > 1 (hybrid sharding): use it alone"
        )
    if getattr(outer, "state_layout", None) == traits.SHARDED:
        raise CompositionError(f"{pair}: two sharding stages do not nest; use one ZeRO stage")
    if not getattr(outer, "across_shards", False):
        raise CompositionError(
            f"{pair}: {_name(outer)} cannot run across replicas over ZeRO's master shards "
            f"({_why_not_across(outer)}); supported across a ZeRO stage: "
            f"{', '.join(across_shard_methods())}"
        )
    if inner_options.get("staleness_bound", 0):
        raise CompositionError(
            f"{pair}: zero1's staleness_bound leaves steps in flight, which a periodic rule "
            "across replicas would average half-applied; use staleness_bound=0"
        )


def _why_not_across(cls: type) -> str:
    if getattr(cls, "training", None) != traits.WRAPPER or getattr(cls, "independent_processes", False):
        return "it trains with worker processes or server roles of its own"
    return "its rule reads gradients or per-rank losses that ZeRO keeps sharded within the replica"


def across_shard_methods() -> list[str]:
    from algorithms.registry import _REGISTRY

    return sorted(name for name, cls in _REGISTRY.items() if getattr(cls, "across_shards", False))


def check_pipeline(cls: type, options: dict[str, Any]) -> None:
    """An algorithm of class `cls` with `options` on the stages of a pipeline (mesh pp > 1)."""
    pair = f"pipeline x {_name(cls)}"
    if getattr(cls, "training", None) != traits.WRAPPER or getattr(cls, "independent_processes", False):
        raise CompositionError(
            f"{pair}: {_name(cls)} {_why_not_across(cls).replace('it trains', 'trains')}, "
            "which cannot run the pipeline's schedule; use a data-parallel method (mbsgd, plsgd, "
            "qsr, easgd, lsgd with leader_metric=loss) or ZeRO on the stages"
        )
    if options.get("leader_metric") == "proxy":
        raise CompositionError(
            f"{pair}: leader_metric='proxy' scores each stage by its own parameters, so the "
            "stages would follow different leaders; use leader_metric='loss' (the replica's "
            "loss, the same on all its stages)"
        )


def check_mesh(cls: type, options: dict[str, Any], mesh: Any) -> None:
    """An algorithm placed on `mesh` (its pp dimension: the pipeline's)."""
    if mesh.shape["pp"] > 1:
        check_pipeline(cls, options)
