"""benchmarks.reproduce --quick end to end: every quick variant trains through `python -m apps.train` on 2
real ranks, the JSON has finite numbers for each, the bytes are ordered as the rules imply, the report and
figures are written, and a second start trains nothing (resumable). No timing assertions."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.reproduce.summary import interpolate_log_bytes
from tests.launch import ROOT

# the quick grid, written out: (task, method, codec)
QUICK = {
    (task, method, "fp32")
    for task in ("mnist", "gpt")
    for method in ("mbsgd", "plsgd-h2", "plsgd-h16", "qsr-a1.41", "easgd", "lsgd")
}
QUICK |= {("mnist", "lapsgd", "fp32"), ("mnist", "plsgd-h2", "int8"), ("gpt", "plsgd-h2", "int8")}


def _reproduce(tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.reproduce",
            "--quick",
            "--results-dir",
            str(tmp_path),
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )


@pytest.mark.mpi
@pytest.mark.slow
def test_reproduce_quick_end_to_end(tmp_path: Path) -> None:
    proc = _reproduce(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "reproduce_quick.json").read_text())
    assert doc["quick"] is True and doc["ranks"] == 2 and doc["missing"] == {}
    rows = {(r["task"], r["method"], r["codec"]): r for r in doc["rows"]}
    assert set(rows) == QUICK
    for key, r in rows.items():
        assert r["seeds_done"] == 1, key
        for field in ("bytes", "loss", "accuracy", "seconds"):
            assert math.isfinite(r[field]["mean"]), (key, field)
        assert r["bytes"]["mean"] > 0 and r["loss"]["mean"] > 0 and 0 <= r["accuracy"]["mean"] <= 1, key
        assert r["curve"] and all(math.isfinite(p["bytes"]) and math.isfinite(p["mean"]) for p in r["curve"]), key
        assert r["runs"][0]["steps"] == doc["budgets"][key[0]]["steps"], key
    for task in ("mnist", "gpt"):
        b = {(m, c): rows[task, m, c]["bytes"]["mean"] for (t, m, c) in rows if t == task}
        # rounds every 16 steps send fewer bytes than every 2; int8 about a quarter of fp32; mbsgd every step
        assert b["plsgd-h16", "fp32"] < b["plsgd-h2", "fp32"] < b["mbsgd", "fp32"]
        assert b["plsgd-h2", "int8"] < 0.5 * b["plsgd-h2", "fp32"]
    # apps log what the algorithm reports: lapsgd its Hogwild workers' staleness per logged chunk
    lap_runs = list((tmp_path / "runs").glob("mnist-lapsgd*-s0"))
    assert len(lap_runs) == 1, sorted(p.name for p in (tmp_path / "runs").iterdir())
    with open(lap_runs[0] / "train.csv") as f:
        logged = [row["staleness_mean"] for row in csv.DictReader(f)]
    assert logged and all(v == "" or float(v) >= 0 for v in logged) and any(v != "" for v in logged), logged
    assert {o["task"] for o in doc["orderings"]["qsr_vs_constant_h"]} == {"mnist", "gpt"}
    assert {o["task"] for o in doc["orderings"]["lsgd_vs_easgd"]} == {"mnist", "gpt"}
    text = (tmp_path / "reproduce_quick.md").read_text()
    assert "The papers' orderings" in text and "LSGD >= EASGD, mnist" in text and text.strip() in proc.stdout
    for task in ("mnist", "gpt"):
        assert (tmp_path / f"reproduce_quick_{task}.png").stat().st_size > 0
        assert (tmp_path / "runs" / f"compare-{task}" / "training.png").stat().st_size > 0

    again = _reproduce(tmp_path)  # every run finished: nothing is trained again
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(QUICK)} of {len(QUICK)} runs already done, 0 to train" in again.stderr
    assert json.loads((tmp_path / "reproduce_quick.json").read_text())["rows"] == doc["rows"]


def test_constant_h_frontier_is_read_in_log_bytes() -> None:
    frontier = [(1e8, 0.80, "H=2"), (1e6, 0.90, "H=16")]
    value, between, inside = interpolate_log_bytes(frontier, 1e7)  # halfway in log bytes
    assert math.isclose(value, 0.85) and between == "H=16 .. H=2" and inside
    assert interpolate_log_bytes(frontier, 1e9) == (0.80, "H=2", False)  # past the ends: the nearest end
    assert interpolate_log_bytes(frontier, 1e5) == (0.90, "H=16", False)
