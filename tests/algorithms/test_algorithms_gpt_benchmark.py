"""Smoke test of benchmarks/algorithms_gpt.py on 2 real ranks: 3 steps of DDP and QSR on the default link
over a small generated text, then the JSON it writes: every field, finite losses, speedups against DDP
and the goal computed, and the PNG. No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import algorithms_gpt
from tests import pseudo_text


@pytest.mark.mpi
def test_algorithms_gpt_benchmark_smoke(tmp_path: Path) -> None:
    pseudo_text.write(tmp_path / "data" / "tinyshakespeare" / "input.txt")  # enough 64-character windows
    out = tmp_path / "results"
    algorithms_gpt.main(
        [
            "--ranks",
            "2",
            "--steps",
            "3",
            "--batch",
            "2",
            "--repeats",
            "1",
            "--cases",
            "qsr",
            "--links",
            "default",
            "--data-dir",
            str(tmp_path / "data"),
            "--results-dir",
            str(out),
            "--timeout",
            "300",
        ]
    )
    doc = json.loads((out / "algorithms_gpt.json").read_text())
    assert (out / "algorithms_gpt.png").stat().st_size > 0
    assert (doc["ranks"], doc["steps"], doc["batch_per_rank"], doc["repeats_done"]) == (2, 3, 2, 1)
    assert [r["case"] for r in doc["runs"]] == ["ddp", "qsr"] and all("result" in r for r in doc["runs"])
    rows = {r["case"]: r for r in doc["results"]["default"]}
    assert set(rows) == {"ddp", "qsr"}
    for row in rows.values():
        assert set(algorithms_gpt.COLUMNS) <= set(row), set(algorithms_gpt.COLUMNS) - set(row)
        assert math.isfinite(row["eval_loss"]) and 0 < row["eval_loss"] < 10
        assert row["samples_per_s"] > 0 and row["bytes_per_step"] > 0 and row["repeats"] == 1
    assert rows["ddp"]["speedup_vs_ddp"] == 1.0 and rows["ddp"]["eval_loss_vs_ddp"] == 1.0
    qsr = rows["qsr"]
    assert qsr["speedup_vs_ddp"] == pytest.approx(qsr["samples_per_s"] / rows["ddp"]["samples_per_s"])
    assert qsr["eval_loss_vs_ddp"] == pytest.approx(qsr["eval_loss"] / rows["ddp"]["eval_loss"])
    assert qsr["goal"].startswith(">= 1.3x, loss <= 1.01x: ") and qsr["goal"].endswith("met")
    assert qsr["comm_seconds_per_step"] >= 0 and rows["ddp"]["comm_seconds_per_step"] is None
