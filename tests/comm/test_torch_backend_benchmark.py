"""Smoke test of benchmarks/ddp_backend.py --quick: DDP on backend "pycomm" and on gloo both measured on real
ranks and the results file written with their ratio. No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import ddp_backend


@pytest.mark.mpi
def test_quick_run_measures_both_backends(tmp_path: Path) -> None:
    assert ddp_backend.main(["--quick", "--results-dir", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "ddp_backend.json").read_text())
    rows = {r["backend"]: r for r in doc["rows"]}
    assert set(rows) == {"pycomm", "gloo"} and all(r["samples_per_s"] > 0 for r in rows.values())
    assert rows["gloo"]["ratio"] == 1.0 and rows["pycomm"]["wrapper"] == "ddp" and rows["pycomm"]["ranks"] == 2
    samples = doc["samples"]["ddp 2 ranks idle"]
    assert len(samples["pycomm"]) == len(samples["gloo"]) == 2
