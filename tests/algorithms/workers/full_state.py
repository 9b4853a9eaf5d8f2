"""Full and per-rank state dicts on real ranks. argv: OUT_DIR MODE[,MODE...] DIR (modes run in turn in the
same processes, so one launch serves them).

save: mbsgd, zero2 and zero3 (AdamW) train 2 steps, each rank on its rows of the batch; opt.full_state_dict()
is written by rank 0 to DIR. load: on another number of ranks, each saved state is loaded into each of the
three methods with load_full_state_dict; its model part must load into a plain torch model equal to the
unsplit model after 2 steps (AdamW on the whole batch, one process), and one more step must equal that
reference's third step (the optimizer state came along). refuse: rank 0's state_dict() of zero2, zero3 and
plsgd loaded on rank 1 is refused, naming rank 0 and full_state_dict; plsgd's full state is the mean of
its ranks' models and optimizer states."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import torch

import algorithms
import pycomm
from tests.algorithms.pipeline_problem import make_batch, make_model
from tests.algorithms.workers.common import run_cases, world
from tests.algorithms.workers.composition import current, rows

METHODS = ("mbsgd", "zero2", "zero3")
SAVED_STEPS, ATOL = 2, 1e-6  # ZeRO's fp32 masters of the float64 model


def adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=1e-2)


def reference(steps: int) -> torch.nn.Module:
    model = make_model("mlp", seed=1)
    opt = adamw(model.parameters())
    for t in range(steps):
        x, y, loss_fn = make_batch("mlp", t)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return model


def wrapped(comm: Any, method: str, seed: int) -> tuple[torch.nn.Module, Any]:
    model = make_model("mlp", seed=seed)
    return model, algorithms.CommOptimizer(adamw(model.parameters()), algorithm=method, comm=comm, model=model)


def train(comm: Any, model: torch.nn.Module, opt: Any, steps: range) -> None:
    for t in steps:
        x, y, loss_fn = make_batch("mlp", t)
        opt.zero_grad()
        loss_fn(model(rows(x, comm.rank, comm.size)), rows(y, comm.rank, comm.size)).backward()
        opt.step()


def save(comm: Any, directory: Path) -> dict[str, Any]:
    for method in METHODS:
        model, opt = wrapped(comm, method, seed=1)
        train(comm, model, opt, range(SAVED_STEPS))
        full = opt.full_state_dict()  # a collective: every rank
        if comm.rank == 0:
            torch.save(full, directory / f"{method}.pt")
    return {"ok": True}


def load(comm: Any, directory: Path, saved: str, method: str) -> dict[str, Any]:
    full = torch.load(directory / f"{saved}.pt", weights_only=True)
    plain = make_model("mlp", seed=5)
    plain.load_state_dict(full["model"])  # the model part is a plain torch state dict
    before, after = reference(SAVED_STEPS), reference(SAVED_STEPS + 1)
    x = make_batch("mlp", 99)[0]
    plain_ok = torch.allclose(plain(x), before(x), atol=ATOL)
    model, opt = wrapped(comm, method, seed=7)  # another initialisation: all of it must come from the file
    opt.load_full_state_dict(full, steps=SAVED_STEPS)
    train(comm, model, opt, range(SAVED_STEPS, SAVED_STEPS + 1))
    want = dict(after.named_parameters())
    bad = [n for n, v in current(opt, model).items() if not torch.allclose(v.double(), want[n].detach(), atol=ATOL)]
    return {"ok": plain_ok and not bad, "plain_model_ok": plain_ok, "bad": bad[:4]}


def refuse(comm: Any, directory: Path, method: str) -> dict[str, Any]:
    options = {"averaging_freq": 4} if method == "plsgd" else {}
    model = make_model("mlp", seed=1)
    opt = algorithms.CommOptimizer(adamw(model.parameters()), algorithm=method, comm=comm, model=model, **options)
    train(comm, model, opt, range(1))
    path = directory / f"state_{method}.pt"
    if comm.rank == 0:
        torch.save(opt.state_dict(), path)
    comm.allreduce(torch.zeros(1), op=pycomm.SUM)  # the file is written before any rank reads it
    if comm.rank == 0:  # its own state loads (a collective under ZeRO, which the others must then join)
        return {"ok": True}
    try:
        opt.load_state_dict(torch.load(path, weights_only=False))
        error = ""
    except ValueError as e:
        error = str(e)
    named = all(w in error for w in ("saved by rank 0 of 2", f"this is rank {comm.rank}", "full_state_dict"))
    return {"ok": named, "message": error}


def average(comm: Any) -> dict[str, Any]:
    """plsgd's ranks hold different models between rounds: its full state is their mean, on every rank."""
    model = make_model("mlp", seed=1)
    opt = algorithms.CommOptimizer(
        adamw(model.parameters()), algorithm="plsgd", comm=comm, model=model, averaging_freq=8
    )
    train(comm, model, opt, range(1))
    mine = {k: v.detach().clone() for k, v in model.state_dict().items()}
    full = opt.full_state_dict()
    bad = []
    for name, value in mine.items():
        mean = value.clone()
        comm.allreduce(mean, op=pycomm.AVG)
        spread = value.clone()
        comm.allreduce(spread, op=pycomm.MAX)
        if not torch.allclose(full["model"][name], mean) or torch.equal(spread, mean):  # ranks differed, mean given
            bad.append(name)
    state = full["optimizer"]["state"][0]["exp_avg"]
    mean_state = opt.torch_optimizer.state[model[0].weight]["exp_avg"].clone()
    comm.allreduce(mean_state, op=pycomm.AVG)
    return {"ok": not bad and torch.allclose(state, mean_state), "bad": bad[:4]}


def mode_cases(comm: Any, mode: str, directory: Path) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    cases: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if mode == "save":
        cases.append(("save", lambda: save(comm, directory)))
    elif mode == "load":
        for saved in METHODS:
            for method in METHODS:
                cases.append((f"{saved}_to_{method}", lambda s=saved, m=method: load(comm, directory, s, m)))
    elif mode == "refuse":
        for method in ("zero2", "zero3", "plsgd"):
            cases.append((f"refuse_{method}", lambda m=method: refuse(comm, directory, m)))
        cases.append(("average_plsgd", lambda: average(comm)))
    else:
        raise ValueError(f"full_state worker: mode {mode!r}, expected save, load or refuse")
    return cases


def main() -> None:
    comm = world()
    modes, directory = sys.argv[2].split(","), Path(sys.argv[3])
    run_cases(comm, [c for mode in modes for c in mode_cases(comm, mode, directory)])


if __name__ == "__main__":
    main()
