"""ZeRO checkpoints: full (gathered: the model's and the optimizer's unsharded state dicts, on every
rank, on CPU) and sharded (this rank's master shard and optimizer state shard, with the layout needed
to reassemble them), and loading a sharded checkpoint written on any number of ranks.

Resharding goes through the unsharded values: each parameter's fp32 master and per-element optimizer
state are reassembled from all the shards (by parameter name, so the grouping may differ between the
writer and the reader), and each rank keeps its pieces. That costs one unsharded copy in CPU memory
while loading. These are state dicts; save_sharded_state_dict writes them through the one checkpoint
writer (algorithms.checkpointing), which apps.train uses too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from algorithms import checkpointing, traits
from algorithms.zero import shard_optimizer

FORMAT = "pycomm.zero.sharded/1"
SHARD_STEM = "sharded_state"  # the files of a save_sharded_state_dict directory: sharded_state[.rank<k>].pt


def _per_element(value: Any) -> bool:
    """Optimizer state with one value per parameter element (exp_avg, momentum_buffer): sharded; a 0-dim
    tensor or a number (Adam's step) is the same on every rank and kept whole."""
    return torch.is_tensor(value) and value.dim() > 0


def _param_groups(opt: Any, saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The shard optimizer's saved groups with the user's current hyper-parameters: a scheduler steps the
    user's optimizer after opt.step(), so the shard's copy (mirrored before each step) is one step behind."""
    return [
        {**g, **shard_optimizer.hyper_parameters(mine)}
        for g, mine in zip(saved["param_groups"], opt.optimizer.param_groups)
    ]


def _state_keys(opt: Any) -> list[str]:
    keys: set[str] = set()
    for state in opt.shard_optimizer.state.values():
        keys.update(k for k, v in state.items() if _per_element(v))
    return sorted(keys)


def _gather_full(opt: Any, shards: list[torch.Tensor]) -> list[torch.Tensor]:
    """fp32 parameter-shaped tensors, in optimizer order, from one fp32 shard-shaped vector per group."""
    out: dict[int, torch.Tensor] = {}
    works = []
    for g, shard in zip(opt.groups, shards):
        full = [torch.empty(shape, dtype=torch.float32, device=shard.device) for shape in g.shapes]
        works.append(
            opt.shard_comm.allgather_coalesced(full, shard, bucket_bytes=opt.options["bucket_bytes"], async_op=True)
        )
        out.update({id(p): f for p, f in zip(g.params, full)})
    for w in works:
        w.wait()
    return [out[id(p)].cpu() for p in opt.params]


@torch.no_grad()
def full_model_state_dict(opt: Any) -> dict[str, torch.Tensor]:
    """The model's state dict with fp32 parameters (buffers as they are), on every rank (collective);
    without model=, the parameters under param_names()."""
    params = _gather_full(opt, [g.master for g in opt.groups])
    if opt.model is None:
        return dict(zip(opt.param_names(), params))
    full = {id(p): f for p, f in zip(opt.params, params)}  # by identity: a tied parameter under each name
    return {k: full.get(id(v), v.detach().cpu().clone()) for k, v in opt.model.state_dict(keep_vars=True).items()}


@torch.no_grad()
def full_state_dict(opt: Any) -> dict[str, Any]:
    """{"model": the model's state dict with fp32 parameters, "optimizer": the wrapped optimizer's state
    dict as if it had run unsharded}, on every rank (collective)."""
    model = full_model_state_dict(opt)
    saved = opt.shard_optimizer.state_dict()
    state: dict[int, dict[str, Any]] = {
        i: {k: v for k, v in s.items() if not _per_element(v)} for i, s in saved["state"].items()
    }
    for key in _state_keys(opt):
        index = {id(p): j for j, p in enumerate(opt.params)}
        shards = [g.assemble([saved["state"][index[id(p)]][key] for p in g.params]) for g in opt.groups]
        for index, full in enumerate(_gather_full(opt, shards)):
            state.setdefault(index, {})[key] = full
    return {"model": model, "optimizer": {"state": state, "param_groups": _param_groups(opt, saved)}}


def sharded_state_dict(opt: Any) -> dict[str, Any]:
    """This rank's shard: per group its fp32 master shard and per-element optimizer state shards, the
    scalars of the optimizer state, the hyper-parameters, and the layout (names, shapes, groups)."""
    saved = opt.shard_optimizer.state_dict()
    index = {id(p): j for j, p in enumerate(opt.params)}
    keys = _state_keys(opt)
    groups = []
    for g in opt.groups:
        members = [index[id(p)] for p in g.params]
        groups.append(
            {
                "params": members,
                "master": g.master.detach().cpu().clone(),
                "state": {k: g.assemble([saved["state"][j][k] for j in members]).cpu() for k in keys},
            }
        )
    scalars = {j: {k: v for k, v in s.items() if not _per_element(v)} for j, s in saved["state"].items()}
    return {
        "format": FORMAT,
        "algorithm": opt.name,
        "rank": opt.shard_comm.rank,
        "world_size": opt.shard_comm.size,
        "steps": opt.steps,
        "names": opt.param_names(),
        "shapes": [tuple(s) for s in opt.param_shapes()],
        "groups": groups,
        "scalars": scalars,
        "param_groups": _param_groups(opt, saved),
    }


def _placement(opt: Any) -> checkpointing.Placement:
    """Where this rank's shard sits: shard index among dp_shard, replica among dp_replicate (hybrid)."""
    replicas = opt.replica_comm
    return checkpointing.Placement(
        {"pp": 1, "dp_replicate": replicas.size if replicas is not None else 1, "dp_shard": opt.shard_comm.size},
        {"pp": 0, "dp_replicate": replicas.rank if replicas is not None else 0, "dp_shard": opt.shard_comm.rank},
    )


def save_sharded(opt: Any, directory: Any) -> None:
    """Write this optimizer's shards as the checkpoint directory `directory` (one file per shard, from
    the first replica; algorithms.checkpointing: committed whole, manifest last). Collective."""
    directory = Path(directory)
    checkpointing.save(
        directory.parent,
        directory.name,
        {SHARD_STEM: (traits.SHARDED, sharded_state_dict(opt))},
        opt.comm,
        _placement(opt),
        meta={"algorithm": opt.name, "steps": opt.steps},
    )


def _from_directory(directory: Path) -> list[dict[str, Any]]:
    """The shards save_sharded wrote into `directory` (or, from before it used algorithms.checkpointing,
    the shard-<rank>-of-<N>.pt files)."""
    if not (directory / checkpointing.MANIFEST).is_file():
        files = sorted(directory.glob("shard-*-of-*.pt"))
        if files:
            return [checkpointing.load_file(f) for f in files]
    ckpt = checkpointing.read_manifest(directory)
    if SHARD_STEM not in ckpt.states:
        raise ValueError(
            f"load_sharded_state_dict: {directory} is a checkpoint but not one of "
            f"save_sharded_state_dict (it holds {', '.join(ckpt.states)})"
        )
    return checkpointing.read(ckpt, SHARD_STEM, checkpointing.Placement.of(None, 0, 1))


def _read(shards: Any) -> list[dict[str, Any]]:
    if isinstance(shards, (str, os.PathLike)):
        shards = _from_directory(Path(shards))
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError(
            "load_sharded_state_dict: give a list of sharded_state_dict() results (one per rank of the "
            f"writing run) or the directory save_sharded_state_dict wrote, got {type(shards).__name__}"
        )
    if any(not isinstance(s, dict) or s.get("format") != FORMAT for s in shards):
        raise ValueError(f"load_sharded_state_dict: every shard must be a sharded_state_dict() ({FORMAT})")
    shards = list({s["rank"]: s for s in shards}.values())  # replicas of one shard (hybrid) hold the same
    size = shards[0]["world_size"]
    ranks = sorted(s["rank"] for s in shards)
    if ranks != list(range(size)) or any(s["world_size"] != size for s in shards):
        raise ValueError(
            f"load_sharded_state_dict: the shards hold ranks {ranks} of a {size}-rank checkpoint; "
            f"all of 0..{size - 1} are needed"
        )
    if len({s["steps"] for s in shards}) > 1:  # shards of different saves, put together by hand
        raise ValueError(
            "load_sharded_state_dict: the shards come from different saves (steps "
            f"{sorted({s['steps'] for s in shards})}); the checkpoint is incomplete"
        )
    return sorted(shards, key=lambda s: s["rank"])


def _check_layout(opt: Any, shard: dict[str, Any]) -> None:
    names, shapes = opt.param_names(), [tuple(s) for s in opt.param_shapes()]
    saved_names, saved_shapes = shard["names"], [tuple(s) for s in shard["shapes"]]
    for i, (name, shape) in enumerate(zip(names, shapes)):
        if i >= len(saved_names):
            raise ValueError(
                f"sharded checkpoint has {len(saved_names)} parameters; this model has more, from "
                f"{name!r}: it was saved for another model"
            )
        if saved_names[i] != name or saved_shapes[i] != shape:
            raise ValueError(
                f"sharded checkpoint does not match this model at parameter {i}: saved "
                f"{saved_names[i]!r} {saved_shapes[i]}, this model has {name!r} {shape}"
            )
    if len(saved_names) > len(names):
        raise ValueError(f"sharded checkpoint has parameter {saved_names[len(names)]!r} that this model lacks")


def _unshard(shards: list[dict[str, Any]], group: int, key: str | None, shapes: list[tuple]) -> dict[int, torch.Tensor]:
    """{parameter index: full tensor} of one saved group, its master (key None) or a state key."""
    parts = [s["groups"][group]["master"] if key is None else s["groups"][group]["state"][key] for s in shards]
    flat = torch.cat(parts)
    out, at = {}, 0
    for j in shards[0]["groups"][group]["params"]:
        n = int(torch.Size(shapes[j]).numel())
        out[j] = flat[at : at + n].view(shapes[j])
        at += n
    return out


@torch.no_grad()
def load_sharded(opt: Any, shards: Any) -> None:
    """Load a sharded checkpoint written on any number of ranks into this rank's shard, and make the
    model's parameters follow (collective only in that last step)."""
    shards = _read(shards)
    _check_layout(opt, shards[0])
    shapes = [tuple(s) for s in shards[0]["shapes"]]
    masters: dict[int, torch.Tensor] = {}
    state: dict[int, dict[str, Any]] = {int(j): dict(v) for j, v in shards[0]["scalars"].items()}
    for gi, group in enumerate(shards[0]["groups"]):
        masters.update(_unshard(shards, gi, None, shapes))
        for key in group["state"]:
            for j, full in _unshard(shards, gi, key, shapes).items():
                state.setdefault(j, {})[key] = full
    index = {id(p): j for j, p in enumerate(opt.params)}
    pieces: dict[int, dict[str, Any]] = {}
    for g in opt.groups:
        for i, p in enumerate(g.params):
            j = index[id(p)]
            g.piece_of(g.master, i).copy_(g.piece_of_full(masters[j], i))
            if j in state:
                pieces[j] = {
                    k: (g.piece_of_full(v, i).clone().to(g.master.device) if _per_element(v) else v)
                    for k, v in state[j].items()
                }
    opt.shard_optimizer.load_state_dict({"state": pieces, "param_groups": shards[0]["param_groups"]})
    for mine, saved in zip(opt.optimizer.param_groups, shards[0]["param_groups"]):
        mine.update({k: v for k, v in saved.items() if k != "params"})
    opt.steps = shards[0]["steps"]
    opt._publish()


def full_as_shard(opt: Any, full: dict[str, Any], steps: int) -> dict[str, Any]:
    """A full_state_dict() (possibly of another world size) as the single shard of a 1-rank sharded
    checkpoint of this model, so load_sharded can place it: one group holding every parameter."""
    if not isinstance(full, dict) or not {"model", "optimizer"} <= set(full):
        raise TypeError(
            "load_full_state_dict: expected the {'model': ..., 'optimizer': ...} dict full_state_dict() "
            f"returns, got {type(full).__name__}"
        )
    names, shapes = opt.param_names(), [tuple(s) for s in opt.param_shapes()]
    missing = [n for n in names if n not in full["model"]]
    if missing:
        raise ValueError(
            f"load_full_state_dict: the model state lacks parameter {missing[0]!r}: it was saved for another model"
        )
    state = {int(j): s for j, s in full["optimizer"]["state"].items()}
    keys = sorted({k for s in state.values() for k, v in s.items() if _per_element(v)})

    def flat(j: int, key: str) -> torch.Tensor:
        value = state.get(j, {}).get(key)
        return torch.zeros(shapes[j]).flatten() if value is None else value.detach().float().cpu().flatten()

    group = {
        "params": list(range(len(names))),
        "master": torch.cat([full["model"][n].detach().float().cpu().flatten() for n in names]),
        "state": {k: torch.cat([flat(j, k) for j in range(len(names))]) for k in keys},
    }
    scalars = {j: {k: v for k, v in s.items() if not _per_element(v)} for j, s in state.items()}
    return {
        "format": FORMAT,
        "algorithm": opt.name,
        "rank": 0,
        "world_size": 1,
        "steps": steps,
        "names": names,
        "shapes": shapes,
        "groups": [group],
        "scalars": scalars,
        "param_groups": full["optimizer"]["param_groups"],
    }
