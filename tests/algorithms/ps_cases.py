"""Many fault-tolerant-algorithm runs on one launch of independent processes
(tests/algorithms/workers/ps_rules.py --cases): starting a process (python, torch, the optimizer's first
build) costs seconds, a run of the rule-check problem a fraction of one. Test files register their cases
when imported; the first test that reads a result launches every case registered so far, once per pytest
session, and each test fails with its own case's name and the launch's output. With `simulate`: the rule
the runs are checked against."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from algorithms.ps import layout
from tests.algorithms.problem import loss_on, make_inner, make_model
from tests.launch import finish, independent

WORKER = "tests.algorithms.workers.ps_rules"
STEPS = 8


def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def simulate(ranks: list[int], steps: int, inner: str, alpha: float = 0.0, period: int = 1) -> torch.Tensor:
    """Synchronous data parallelism from the rule: every step the mean of the ranks' gradients on their
    batches, one optimizer step; every `period` steps x <- alpha * (mean of the period's iterates) +
    (1 - alpha) * x. Starts from rank 0's model (seed 1)."""
    model = make_model(seed=1)
    opt = make_inner(inner, model.parameters())
    window = []
    for t in range(steps):
        grads = []
        for r in ranks:
            model.zero_grad()
            loss_on(model, r, t).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = torch.stack([g[i] for g in grads]).mean(0)
        opt.step()
        window.append(flat(model.parameters()).clone())
        if (t + 1) % period == 0:
            x = alpha * torch.stack(window).mean(0) + (1 - alpha) * flat(model.parameters())
            torch.nn.utils.vector_to_parameters(x, model.parameters())
            window = []
    return flat(model.parameters())


@dataclass(frozen=True)
class Case:
    """One run: `world` processes (ranks 0 .. world - 1 of the launch), `slow`: (rank, factor) sleeping."""

    algorithm: str
    world: int
    options: tuple[tuple[str, Any], ...] = ()
    steps: int = STEPS
    inner: str = "momentum"
    slow: tuple[int, float] | None = None


def case(algorithm: str, world: int, options: dict | None = None, **more: Any) -> Case:
    """A Case with the tests' default worker_timeout (generous: a loaded machine) under `options`."""
    return Case(algorithm, world, tuple({"worker_timeout": 20, **(options or {})}.items()), **more)


_REGISTERED: dict[str, Case] = {}  # every case the collected test files declared, by "<group>/<name>"
_LAUNCHED: dict[str, tuple[Path, str]] = {}  # case -> (its launch's folder, the launch's output)


def register(group: str, cases: dict[str, Case]) -> dict[str, Case]:
    """Declare a test file's cases (at import: pytest collects every file before it runs a test, so one
    launch serves the cases of all the collected files); returns them."""
    for name, c in cases.items():
        _REGISTERED[f"{group}/{name}"] = c
    return cases


def _launch(cases: dict[str, Case]) -> None:
    out = Path(tempfile.mkdtemp(prefix="ps-cases-"))
    world = max(c.world for c in cases.values())
    spec = [{**asdict(c), "name": name.replace("/", "-"), "options": dict(c.options)} for name, c in cases.items()]
    # every case listens on ports of its own: a late message of one never reaches the next
    procs = independent(
        world, WORKER, "--cases", json.dumps(spec), str(out), base_port=layout.free_base_port(world * len(cases))
    )
    done = finish(procs, timeout=1200, expect_ok=False)
    output = "\n".join(f"--- process {r} exit {c} ---\n{o[-3000:]}\n{e[-6000:]}" for r, (c, o, e) in enumerate(done))
    for name in cases:
        _LAUNCHED[name] = (out, output)


def results(group: str, name: str) -> list[dict]:
    """Every rank's result of case `name` of `group` (rank order); the first call launches every registered
    case not run yet, together."""
    key = f"{group}/{name}"
    if key not in _LAUNCHED:
        _launch({k: c for k, c in _REGISTERED.items() if k not in _LAUNCHED})
    out, output = _LAUNCHED[key]
    ranks = []
    for r in range(_REGISTERED[key].world):
        path = out / f"{key.replace('/', '-')}-rank{r}.pt"
        assert path.exists(), f"case {key!r}: rank {r} saved no result\n{output}"
        ranks.append(torch.load(path))
        assert "error" not in ranks[-1], f"case {key!r}, rank {r}:\n{ranks[-1]['error']}\n{output}"
    return ranks
