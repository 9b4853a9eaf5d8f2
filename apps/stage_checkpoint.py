"""What one rank of an apps.parallel.Layout saves of the model and loads back: its pipeline stage's part of
the whole model's state dict, under the model's own names (so the stages' files join by name into the
whole model: apps.checkpoint.load_model_state, apps.serve), with the values ZeRO holds sharded gathered;
and what a resume must agree with beyond the mesh (algorithms/checkpointing/placement.py refuses a change
of pp): the pipeline's cut of the layers, and for ZeRO inside a method the dp_replicate x dp_shard sizes.
Without a pipeline a rank's part is the whole model."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from algorithms.checkpointing import CheckpointError, Placement


def model_keys(layout: Any, model: nn.Module) -> list[str]:
    """The keys of the whole model's state dict this rank saves and loads: its stage's, and those of no stage
    (tensors outside the pipeline's layers: the same on every stage, saved by each); all without stages."""
    state = model.state_dict(keep_vars=True)
    if layout.pipe is None:
        return list(state)
    mine = {id(t) for t in layout.module.state_dict(keep_vars=True).values()}
    staged = {id(t) for t in model.pipeline_layers().state_dict(keep_vars=True).values()}
    return [k for k, v in state.items() if id(v) in mine or id(v) not in staged]


def model_state(
    layout: Any, opt: Any, model: nn.Module, gathered: Optional[dict[str, torch.Tensor]] = None
) -> dict[str, torch.Tensor]:
    """This rank's part of the whole model's state dict (model_keys), ZeRO's values gathered (collective
    over dp_shard; `gathered`: a full_state_dict's model, already gathered)."""
    own = layout.own_values(opt, gathered)
    state = model.state_dict(keep_vars=True)
    return {k: own.get(id(state[k]), state[k]).detach().cpu() for k in model_keys(layout, model)}


def load_model(layout: Any, model: nn.Module, state: dict[str, torch.Tensor], parameters: bool = True) -> None:
    """Load a model_state into the model (only its buffers with `parameters=False`: the optimizer then sets
    the parameters from its masters); parameters ZeRO-3 keeps empty between steps are left to the optimizer
    state loaded after it."""
    keys, current = model_keys(layout, model), model.state_dict(keep_vars=True)
    if set(keys) != set(state):
        missing, unexpected = sorted(set(keys) - set(state))[:3], sorted(set(state) - set(keys))[:3]
        where = f" (pipeline stage {layout.pipe.stage})" if layout.pipe is not None else ""
        raise CheckpointError(
            f"the checkpoint's model state does not fit this model{where}: missing {missing}, unexpected {unexpected}"
        )
    params = {id(p) for p in model.parameters()}
    model.load_state_dict(
        {
            k: v
            for k, v in state.items()
            if (parameters or id(current[k]) not in params) and (current[k].numel() or not v.numel())
        },
        strict=False,
    )


def module_state(layout: Any, model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A model_state under the names of this rank's module (the stage's layers), as an optimizer built over
    it names the parameters (ZeRO's full state dicts)."""
    names = {id(v): k for k, v in model.state_dict(keep_vars=True).items()}
    return {
        k: state[names[id(v)]] for k, v in layout.module.state_dict(keep_vars=True).items() if names.get(id(v)) in state
    }


def manifest_facts(layout: Any) -> dict[str, Any]:
    """What a resume must agree with beyond the mesh, for the checkpoint's manifest: where the pipeline cut
    the layers."""
    return {} if layout.pipe is None else {"pipeline_bounds": list(layout.pipe.bounds)}


def check_resume(layout: Any, written_on: Placement, facts: dict[str, Any]) -> None:
    """Refuse a checkpoint this layout cannot continue, naming both sides: the layers cut elsewhere, or ZeRO
    inside a method on another dp_replicate x dp_shard (each rank's state is its replica's own shard)."""
    bounds = facts.get("pipeline_bounds")
    if layout.pipe is not None and bounds is not None and list(bounds) != list(layout.pipe.bounds):
        raise CheckpointError(
            f"the checkpoint's pipeline cut the model's layers at {list(bounds)} (parallel.split="
            f"{list(bounds[1:-1])}); this run cuts them at {list(layout.pipe.bounds)}: resume with "
            f"parallel.split={list(bounds[1:-1])} and the same schedule and chunks"
        )
    if layout.cfg.sharding is None:
        return
    saved = {d: written_on.shape[d] for d in ("dp_replicate", "dp_shard")}
    mine = {d: layout.mesh.shape[d] for d in saved}
    if saved != mine:
        raise CheckpointError(
            f"the checkpoint was written on dp_replicate={saved['dp_replicate']} x dp_shard="
            f"{saved['dp_shard']} with {layout.cfg.sharding} inside dp_shard; this run has "
            f"dp_replicate={mine['dp_replicate']} x dp_shard={mine['dp_shard']}: each rank holds "
            f"its replica's own shard, so resume with the sizes it was written with"
        )
