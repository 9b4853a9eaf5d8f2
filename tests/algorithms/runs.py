"""Launching an algorithms worker once per world size and reading every rank's per-case results, so
that one mpirun serves many pytest cases."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.launch import mpirun

_CACHE: dict[tuple[str, int], tuple[list[dict[str, Any]], str]] = {}


def results(worker: str, n: int, *args: str, timeout: float = 900) -> tuple[list[dict[str, Any]], str]:
    """([rank 0 results, rank 1 results, ...], the run's output) of tests.algorithms.workers.<worker>."""
    key = (worker, n, *args)
    if key not in _CACHE:
        out = tempfile.mkdtemp(prefix=f"algos-{worker}-")
        proc = mpirun(n, f"tests.algorithms.workers.{worker}", out, *args, timeout=timeout, expect_ok=False)
        ranks = []
        for r in range(n):
            path = Path(out) / f"rank{r}.json"
            ranks.append(json.loads(path.read_text()) if path.exists() else {})
        _CACHE[key] = (ranks, f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return _CACHE[key]


def case(worker: str, n: int, name: str, *args: str, timeout: float = 900) -> list[dict[str, Any]]:
    """Every rank's result for case `name`, failing with the run's output when a rank has none."""
    ranks, output = results(worker, n, *args, timeout=timeout)
    missing = [r for r, res in enumerate(ranks) if name not in res]
    assert not missing, f"ranks {missing} reported nothing for {name!r}\n{output}"
    errors = [res[name]["error"] for res in ranks if "error" in res[name]]
    assert not errors, errors[0]
    return [res[name] for res in ranks]
