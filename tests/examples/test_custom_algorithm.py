"""examples/custom_algorithm.py: the algorithm it registers trains on 2 real ranks both from the script
itself (under mpirun) and through `python -m apps.train -o algorithm.module=examples.custom_algorithm`,
as its opening lines show, with its option reaching it and a bad value of it refused before any rank
starts."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples import run_example
from tests.launch import ROOT

APPS_TRAIN = ["-m", "apps.train", "-o", "algorithm.module=examples.custom_algorithm", "-o", "algorithm.name=gradavg"]


def apps_train(*args: str) -> subprocess.CompletedProcess:
    """`python -m apps.train ...` from the checkout root, as the example's docstring shows it."""
    return subprocess.run(
        [sys.executable, *APPS_TRAIN, *args],
        cwd=ROOT,
        env=run_example.user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.mpi
def test_from_the_script_the_ranks_learn_the_same_weights() -> None:
    out = run_example.run("custom_algorithm.py").stdout
    losses = run_example.numbers(r"step \d+: loss ([\d.]+)", out)
    assert len(losses) == 4 and losses[-1] < 0.05, out  # y = x . (0..9) + 1 + noise of variance 0.01
    ranks = re.findall(
        r"rank (\d): GradAvg\(SGD, codec=None, bucket_bytes=None, max_norm=50\.0\), weights (\[.*?\]), "
        r"sent (\d+) bytes",
        out,
    )
    assert sorted(r for r, _, _ in ranks) == ["0", "1"], out
    assert ranks[0][1] == ranks[1][1] and int(ranks[0][2]) > 0, out  # the same weights, after communicating
    weights = [float(w) for w in ranks[0][1].strip("[]").split(",")]
    assert all(abs(w - i) < 0.05 for i, w in enumerate(weights)), weights


@pytest.mark.mpi
def test_through_apps_train_as_its_docstring_shows(tmp_path: Path) -> None:
    shown = " ".join(APPS_TRAIN[2:])
    assert shown in " ".join(run_example.docstring("custom_algorithm.py").replace("\\\n", " ").split())
    proc = apps_train(
        "--nproc",
        "2",
        "-o",
        "algorithm.options.max_norm=1.0",
        "-o",
        "train.max_steps=30",
        "-o",
        "model.name=mlp",
        "-o",
        "data.segment_size=1000",
        "-o",
        "train.eval_every_epochs=0.1",
        "-o",
        "logging.plot=false",
        "-o",
        f"out_dir={tmp_path}",
        "-o",
        "name=gradavg",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gradavg over 2 rank(s)" in proc.stdout, proc.stdout
    assert "options: {max_norm: 1.0}" in (tmp_path / "gradavg" / "config.yaml").read_text()
    rows = list(csv.DictReader(open(tmp_path / "gradavg" / "train.csv")))
    assert float(rows[-1]["comm_bytes"]) > 0 and float(rows[-1]["loss"]) < float(rows[0]["loss"]), rows
    evals = list(csv.DictReader(open(tmp_path / "gradavg" / "eval.csv")))
    assert float(evals[-1]["accuracy"]) > 0.5, evals
    # declared IDENTICAL: one copy of the model and optimizer state in the checkpoint
    last = sorted((tmp_path / "gradavg" / "checkpoints").glob("ckpt.step*"))[-1]
    assert (last / "optim_state_dict.pt").exists() and not (last / "optim_state_dict.rank1.pt").exists()

    bad = apps_train("--print-config", "-o", "algorithm.options.max_norm=-1")
    assert bad.returncode == 2 and "gradavg: max_norm must be a number > 0 or None, got -1" in bad.stderr, bad.stderr
