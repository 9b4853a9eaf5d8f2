"""benchmarks/ddp_hooks_link.py's rows from a job's runs: medians over repeats, each case's speed against fp32 DDP
on its own backend (the hooks' gain is read against the same transport). The measurement itself needs the
emulated cluster and takes minutes: it is not run here (tests/cluster covers the cluster)."""

from __future__ import annotations

import pytest

from benchmarks.ddp_hooks_link import summarise


def _run(speed: float, loss: float, wire: int | None = None) -> dict:
    return {"samples_per_s": speed, "final_loss": loss, "wire_bytes_per_step": wire}


def test_rows_are_medians_against_fp32_on_the_same_backend() -> None:
    runs = {
        "pycomm fp32": [_run(100, 1.0), _run(300, 1.2), _run(200, 1.1)],
        "pycomm int8": [_run(400, 1.3, 25), _run(500, 1.3, 25), _run(600, 1.3, 25)],
        "gloo fp32": [_run(50, 1.0), _run(50, 1.0), _run(50, 1.0)],
        "gloo int8": [_run(25, 1.4, 25), _run(25, 1.4, 25), _run(25, 1.4, 25)],
    }
    rows = {(r["backend"], r["codec"]): r for r in summarise("gpt", runs, {"loadavg_1m": 3.0})}
    assert rows["pycomm", "fp32"]["samples_per_s"] == 200 and rows["pycomm", "fp32"]["ratio"] == 1.0
    assert rows["pycomm", "int8"]["ratio"] == pytest.approx(2.5)  # 500 / 200, not against gloo's 50
    assert rows["gloo", "int8"]["ratio"] == pytest.approx(0.5)
    assert (rows["pycomm", "int8"]["min"], rows["pycomm", "int8"]["max"]) == (400, 600)
    assert (
        rows["pycomm", "fp32"]["final_loss"] == pytest.approx(1.1) and rows["gloo", "int8"]["wire_bytes_per_step"] == 25
    )
    assert all(r["model"] == "gpt" and r["loadavg_1m"] == 3.0 for r in rows.values())
