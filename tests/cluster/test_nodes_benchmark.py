"""benchmarks/nodes.py in its smallest configuration on the emulated cluster (2 nodes x 1 rank at 1 Gbit/s,
a few steps): the torch DDP peer and pycomm's mbsgd both train and are scored, their bytes crossed the link, and
the JSON and PNG hold a row, a curve and the time to DDP's loss for each, and the two, one method on the same
samples, end at the same loss. Skipped with the reason where the cluster cannot be made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cluster import unavailable
from tests.launch import ROOT, check, worker_env

STEPS = 6
MODEL_BYTES = 861_480  # SmallCNN's fp32 parameters: what one all-reduce of its gradients moves per node


@pytest.mark.mpi
def test_the_benchmark_races_ddp_and_mbsgd_across_two_nodes(tmp_path: Path) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.nodes",
            "--steps",
            str(STEPS),
            "--rates",
            "1gbit",
            "--cases",
            "ddp",
            "mbsgd",
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    check(proc, "benchmarks.nodes")
    doc = json.loads((tmp_path / "nodes.json").read_text())
    rows = {r["case"]: r for r in doc["rows"]}
    assert set(rows) == {"ddp", "mbsgd"} and all(r["rate"] == "1gbit" for r in rows.values()), rows
    for case, row in rows.items():
        curve = doc["curves"]["1gbit"][case]
        assert curve[-1][0] == STEPS and curve[-1][2] == row["final_loss"] < 2.3, (case, curve)  # it learned
        assert 0 < row["train_s"] and row["samples_per_s"] > 0, row
        # each step's gradients (one model's worth per node each way) crossed the link between the nodes
        assert row["bytes_across"] >= 2 * STEPS * MODEL_BYTES, row
    # the same problem on both sides (benchmarks/nodes_problem.py), the same samples in the same order (the peers'
    # loop takes apps.train's data order): DDP and mbsgd are one method, so they end at the same loss
    assert rows["mbsgd"]["final_loss"] == pytest.approx(rows["ddp"]["final_loss"], rel=1e-3), rows
    assert rows["ddp"]["to_target_vs_ddp"] == 1.0 and rows["ddp"]["to_target_s"] is not None, rows["ddp"]
    assert (tmp_path / "nodes.png").read_bytes()[:4] == b"\x89PNG"
