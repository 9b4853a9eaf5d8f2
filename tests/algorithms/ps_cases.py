"""Several fault-tolerant-algorithm runs on one launch of independent processes
(tests/algorithms/workers/ps_rules.py --cases): starting a process (python, torch, the optimizer's first
build) costs seconds, a run of the rule-check problem a fraction of one. Each launch is made once per
pytest session and read by many cases, each failing with its own name and the run's output."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from algorithms.ps import layout
from tests.launch import finish, independent

WORKER = "tests.algorithms.workers.ps_rules"
STEPS = 8


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


_LAUNCHES: dict[tuple[tuple[str, Case], ...], tuple[Path, str]] = {}


def _launch(cases: dict[str, Case]) -> tuple[Path, str]:
    key = tuple(cases.items())
    if key not in _LAUNCHES:
        out = Path(tempfile.mkdtemp(prefix="ps-cases-"))
        world = max(c.world for c in cases.values())
        spec = [{**asdict(c), "name": name, "options": dict(c.options)} for name, c in cases.items()]
        # every case listens on ports of its own: a late message of one never reaches the next
        procs = independent(
            world, WORKER, "--cases", json.dumps(spec), str(out), base_port=layout.free_base_port(world * len(cases))
        )
        done = finish(procs, timeout=900, expect_ok=False)
        output = "\n".join(
            f"--- process {r} exit {c} ---\n{o[-3000:]}\n{e[-6000:]}" for r, (c, o, e) in enumerate(done)
        )
        _LAUNCHES[key] = (out, output)
    return _LAUNCHES[key]


def results(cases: dict[str, Case], name: str) -> list[dict]:
    """Every rank's result of case `name` (rank order), launching `cases` together the first time."""
    out, output = _launch(cases)
    ranks = []
    for r in range(cases[name].world):
        path = out / f"{name}-rank{r}.pt"
        assert path.exists(), f"case {name!r}: rank {r} saved no result\n{output}"
        ranks.append(torch.load(path))
        assert "error" not in ranks[-1], f"case {name!r}, rank {r}:\n{ranks[-1]['error']}\n{output}"
    return ranks
