"""What every algorithm worker shares: the communicator, running a configuration for some steps."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

import algorithms
import pycomm
from tests.algorithms.problem import loss_on, lr_at, make_inner, make_model


def world() -> Any:
    torch.set_num_threads(1)
    pycomm.init()
    return pycomm.world()


def build(
    comm: Any, algorithm: str, options: dict[str, Any], inner: str, batchnorm: bool, init_seed: int | None = None
) -> tuple[torch.nn.Module, Any]:
    """A model initialised differently on every rank (wrapping must broadcast rank 0's) and its wrapper."""
    model = make_model(seed=1 + comm.rank if init_seed is None else init_seed, batchnorm=batchnorm)
    opt = algorithms.CommOptimizer(
        make_inner(inner, model.parameters()), algorithm=algorithm, comm=comm, model=model, **options
    )
    return model, opt


def train(
    comm: Any,
    model: torch.nn.Module,
    opt: Any,
    first: int,
    last: int,
    schedule: bool,
    on_step: Callable[[int], None] | None = None,
    before_step: Callable[[int], None] | None = None,
) -> list[list[torch.Tensor]]:
    """Steps first..last-1 on this rank's fixed batches; the state_dict values after each step."""
    base_lr = opt.param_groups[0].get("base_lr", opt.param_groups[0]["lr"])
    for g in opt.param_groups:
        g.setdefault("base_lr", g["lr"])
    out = []
    for t in range(first, last):
        if schedule:
            for g in opt.param_groups:
                g["lr"] = lr_at(t, base_lr)
        opt.zero_grad()
        loss = loss_on(model, comm.rank, t)
        loss.backward()
        if before_step:
            before_step(t)
        opt.step(loss=loss)
        out.append([v.detach().clone() for v in model.state_dict().values()])
        if on_step:
            on_step(t)
    return out


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((float((x.double() - y.double()).abs().max()) for x, y in zip(a, b) if x.numel()), default=0.0)


def run_cases(comm: Any, cases: Iterable[tuple[str, Callable[[], dict[str, Any]]]]) -> None:
    """Run each (name, case) -> {"ok": bool, ...}, an exception counting as a failure with its traceback;
    each rank writes its results to OUT_DIR (argv[1]) as rank<r>.json for the tests (one pytest case per
    name) and exits non-zero when any case failed."""
    results: dict[str, Any] = {}
    failures = 0
    for name, run in cases:
        try:
            results[name] = run()
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
        failures += not results[name]["ok"]
        print(f"rank {comm.rank} {name}: {results[name]}", flush=True)
    (Path(sys.argv[1]) / f"rank{comm.rank}.json").write_text(json.dumps(results, indent=1))
    sys.exit(1 if failures else 0)
