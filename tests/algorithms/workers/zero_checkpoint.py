"""ZeRO checkpoints on 4 ranks, in one launch. argv: OUT_DIR CKPT_ROOT ALGORITHM,ALGORITHM,... (zero1-k2: zero1
with staleness_bound=2). Each algorithm in turn, with its own fresh model and optimizer, its checkpoint in
CKPT_ROOT/<algorithm> and its results under "<case>_<algorithm>":
- save (4 ranks): train 5 steps, write the sharded checkpoint to <dir>/shards and full_state_dict() to
  <dir>/full.pt; and same-N resume: state_dict() after 5 steps, 5 more steps == a fresh optimizer loading
  it, 5 steps, bit for bit.
- load2 / load3, once every algorithm has saved: on communicators of 2 ranks (ranks 0-1 and 2-3, each) and
  of 3 (ranks 0-2; rank 3 reports {"outside": True}) split from the 4, load <dir>/shards into a fresh model
  and optimizer: full_state_dict() equal to the saved one exactly; other_model (on the 2-rank ones): a model
  with other parameter names is refused naming the first mismatched key."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import torch

import algorithms
from tests.algorithms.workers.common import max_diff, run_cases, world
from tests.algorithms.zero_problem import TinyScaled, make_inner, train


def build(comm: Any, algorithm: str, model: torch.nn.Module | None = None) -> tuple[torch.nn.Module, Any]:
    """`algorithm` may end in -kK: zero1 with staleness_bound=K (its checkpoints drain the steps in flight)."""
    model = model or TinyScaled(seed=1 + comm.rank)
    name, _, bound = algorithm.partition("-k")
    options = {"staleness_bound": int(bound)} if bound else {}
    opt = algorithms.CommOptimizer(
        make_inner("adamw", model.parameters()), algorithm=name, comm=comm, model=model, bucket_bytes=64, **options
    )
    return model, opt


def flat(tree: Any) -> list[torch.Tensor]:
    """Every tensor (and number, as a tensor) of a nested state, in a fixed order."""
    if isinstance(tree, dict):
        return [t for k in sorted(tree, key=str) for t in flat(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in flat(v)]
    if torch.is_tensor(tree):
        return [tree.detach().cpu().double().reshape(-1)]
    return [torch.tensor([float(tree)], dtype=torch.float64)] if isinstance(tree, (int, float)) else []


def same(a: Any, b: Any) -> bool:
    fa, fb = flat(a), flat(b)
    return len(fa) == len(fb) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(fa, fb))


def save(comm: Any, directory: str, algorithm: str) -> dict[str, Any]:
    model, opt = build(comm, algorithm)
    train(model, opt, comm.rank, 5)
    opt.save_sharded_state_dict(f"{directory}/shards")
    full = opt.full_state_dict()
    if comm.rank == 0:
        torch.save(full, f"{directory}/full.pt")
    comm.barrier()
    return {"ok": len(full["optimizer"]["state"]) == len(list(model.parameters()))}


def resume(comm: Any, algorithm: str) -> dict[str, Any]:
    model, opt = build(comm, algorithm)
    train(model, opt, comm.rank, 5)
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = opt.state_dict()
    train(model, opt, comm.rank, 5, first=5)
    again, opt2 = build(comm, algorithm)
    again.load_state_dict(model_state)
    opt2.load_state_dict(opt_state)
    train(again, opt2, comm.rank, 5, first=5)
    # the full state dicts: zero3's model holds empty parameters between steps
    diff = max_diff(list(opt.full_state_dict()["model"].values()), list(opt2.full_state_dict()["model"].values()))
    return {"ok": diff == 0.0, "max_diff": diff}


def load(comm: Any, directory: str, algorithm: str) -> dict[str, Any]:
    saved = torch.load(f"{directory}/full.pt", weights_only=False)
    model, opt = build(comm, algorithm)
    opt.load_sharded_state_dict(f"{directory}/shards")
    full = opt.full_state_dict()
    return {
        "ok": same(full, saved) and opt.steps == 5,
        "steps": opt.steps,
        "model_diff": max_diff(list(full["model"].values()), list(saved["model"].values())),
    }


def other_model(comm: Any, directory: str, algorithm: str) -> dict[str, Any]:
    model = TinyScaled(seed=1)
    model.body = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 4))
    _, opt = build(comm, algorithm, model)
    try:
        opt.load_sharded_state_dict(f"{directory}/shards")
    except ValueError as e:
        return {"ok": "body.2.weight" in str(e), "error_text": str(e)}
    return {"ok": False, "why": "another model's checkpoint loaded"}


LOAD_SIZES = (2, 3)


def main() -> None:
    comm = world()
    root, names = Path(sys.argv[2]), sys.argv[3].split(",")
    # made up front: a split is collective over all 4 ranks, whichever sub-communicator a rank joins
    subs = {n: comm.split(comm.rank // n if comm.rank // n < comm.size // n else -1) for n in LOAD_SIZES}
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    for algorithm in names:
        directory = str(root / algorithm)
        (root / algorithm).mkdir(exist_ok=True)  # every rank: whichever gets there first makes it
        cases += [
            (f"save_{algorithm}", lambda d=directory, a=algorithm: save(comm, d, a)),
            (f"resume_{algorithm}", lambda a=algorithm: resume(comm, a)),
        ]
    for algorithm in names:  # after every save (save() ends in a barrier)
        directory = str(root / algorithm)
        for n, sub in subs.items():
            cases.append((f"load{n}_{algorithm}", in_group(sub, lambda s, d=directory, a=algorithm: load(s, d, a))))
        other = in_group(subs[2], lambda s, d=directory, a=algorithm: other_model(s, d, a))
        cases.append((f"other_model_{algorithm}", other))
    run_cases(comm, cases)


def in_group(sub: Any, run: Callable[[Any], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """`run` on sub-communicator `sub`; a rank outside it (None) reports so instead."""
    return lambda: {"ok": True, "outside": True} if sub is None else {**run(sub), "group": sub.size}


if __name__ == "__main__":
    main()
