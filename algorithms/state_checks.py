"""What load_state_dict refuses, before it changes anything, with a message naming what was saved and what
to do: another algorithm's state, another number of ranks for a state that differs per rank, another
rank's (or mesh position's) shard or local state, another model's optimizer state."""

from __future__ import annotations

from typing import Any

import torch

from algorithms import traits

STATE_VERSION = 1


def check_source(state: Any, name: str) -> None:
    """Refuse a state another algorithm (or another kind of save) wrote, naming what wrote it."""
    if not isinstance(state, dict):
        raise ValueError(f"state is not a CommOptimizer state_dict (a dict), got {type(state).__name__}")
    writer = state.get("algorithm")
    if writer is not None and writer != name:
        kind = (
            " as a sharded_state_dict() (load it into that algorithm with load_sharded_state_dict)"
            if state.get("format") is not None
            else ""
        )
        raise ValueError(
            f"state was written by algorithm {writer!r}{kind}; this is {name!r}: load it into a {writer!r} optimizer"
        )
    if state.get("version") != STATE_VERSION:
        what = (
            "a torch optimizer's state_dict (algorithm 'none', or a full_state_dict()['optimizer'])"
            if {"state", "param_groups"} <= set(state)
            else f"keys {sorted(map(str, state))[:6]}"
        )
        raise ValueError(f"state is not a CommOptimizer state_dict of version {STATE_VERSION}: it holds {what}")


def resize_refusal(opt: Any, saved: int) -> str:
    head = f"state was written on {saved} ranks, this world has {opt.comm.size}"
    if opt.state_layout == traits.SHARDED:
        return (
            f"{head}: {opt.name}'s state_dict() holds this rank's shard; save sharded_state_dict() (or "
            "full_state_dict()) and load it with load_sharded_state_dict() (load_full_state_dict()), which "
            "reshard to any number of ranks"
        )
    return (
        f"{head}: {opt.name}'s ranks hold different states (state_layout {opt.state_layout}), which can be "
        f"neither split nor merged; resume with {saved} ranks, or save full_state_dict() (their average) and load "
        "it with load_full_state_dict() on any number of ranks"
    )


def check_owner(opt: Any, state: dict[str, Any]) -> None:
    """A state that differs per rank (a shard, a local model) is refused on any rank but the one (and mesh
    position: pipeline stage, shard) that saved it: loaded elsewhere it would step another rank's shard
    or fail inside a later step."""
    if opt.state_layout == traits.IDENTICAL or opt.independent_processes:
        return  # independent processes resume from their writer's state, whichever rank that was (ssp)
    saved_mesh = state.get("mesh") or {}
    mine = {"shape": dict(opt.mesh.shape), "coords": dict(opt.mesh.coords)}
    same_rank = state["rank"] == opt.comm.rank
    same_place = not saved_mesh or saved_mesh == mine  # states written before the mesh was recorded
    if same_rank and same_place:
        return
    what = "this rank's shard" if opt.state_layout == traits.SHARDED else "this rank's own model and optimizer state"
    where = f"rank {state['rank']} of {state['world_size']}"
    if saved_mesh:
        where += f" at mesh {_place(saved_mesh)}"
    here = f"rank {opt.comm.rank} of {opt.comm.size} at mesh {_place(mine)}"
    full = (
        ", or save opt.full_state_dict() (on every rank; it is a collective) and load it anywhere with "
        "opt.load_full_state_dict()"
        if hasattr(opt, "load_full_state_dict")
        else ""
    )
    raise ValueError(
        f"{opt.name} state_dict() holds {what} (layout {opt.state_layout}); it was saved by {where}, "
        f"this is {here}: save state_dict() on every rank and load each rank's own file{full}"
    )


def _place(mesh: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}/{mesh['shape'].get(k, '?')}" for k, v in mesh["coords"].items())


def check_optimizer_shapes(saved: Any, params: list[torch.Tensor]) -> None:
    """A torch optimizer loads per-parameter state of the wrong shapes without a word and fails at the next
    step; refuse another model's state here, naming the first parameter that differs."""
    groups = saved.get("param_groups", []) if isinstance(saved, dict) else []
    ids = [i for g in groups for i in g.get("params", [])]
    if len(ids) != len(params):
        raise ValueError(
            f"optimizer state holds {len(ids)} parameters, this optimizer has {len(params)}: it was "
            "saved for another model"
        )
    per_param = saved.get("state", {})
    for index, (saved_id, p) in enumerate(zip(ids, params)):
        for key, value in per_param.get(saved_id, {}).items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape != p.shape:
                raise ValueError(
                    f"optimizer state {key!r} of parameter {index} has shape {tuple(value.shape)}, "
                    f"the parameter has {tuple(p.shape)}: the state was saved for another model"
                )
