"""Running a command again whose `runs/<name>/` holds an earlier run: refused with the ways on (--resume
auto, a new name, --overwrite) and the earlier run left as it was; --overwrite replaces it whole; --resume
auto continues it."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apps.config import loading
from apps.run_dir import RunExists, claim
from tests.apps import runs
from tests.launch import ROOT, worker_env

SHORT = ("-o", "train.max_steps=4", "-o", "checkpoint.every_steps=2")


def _refused(argv: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _checkpoints(run_dir: Path) -> list[str]:
    """The periodic checkpoints (not the best one's)."""
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if ".best." not in p.name)


def _steps(run_dir: Path) -> list[int]:
    return [int(row["step"]) for row in csv.DictReader(open(run_dir / "train.csv"))]


def test_a_second_run_of_the_same_name_is_refused_until_resumed_or_overwritten(tmp_path: Path) -> None:
    argv = runs.args(tmp_path, "again", "none", 1, *SHORT)
    runs.run(argv)
    run_dir = tmp_path / "again"
    first = _checkpoints(run_dir)
    assert first == ["ckpt.step00000002", "ckpt.step00000004"], first
    csv_before = (run_dir / "train.csv").read_text()

    err = _refused(argv).stderr
    assert f"error: {run_dir} already holds a run named 'again' (config.yaml, checkpoints/ckpt." in err, err
    assert (
        "add --resume auto to continue it, -o name=NEW to start another beside it, or --overwrite to replace it" in err
    ), err
    assert _checkpoints(run_dir) == first and (run_dir / "train.csv").read_text() == csv_before  # untouched

    runs.run(argv + ["-o", "train.max_steps=6", "--resume", "auto"])
    assert _checkpoints(run_dir)[-1] == "ckpt.step00000006" and _steps(run_dir) == [1, 2, 3, 4, 5, 6]

    runs.run(argv + ["-o", "train.max_steps=3", "-o", "checkpoint.every_steps=3", "--overwrite"])
    assert _checkpoints(run_dir) == ["ckpt.step00000003"]  # the earlier run's checkpoints are gone
    assert _steps(run_dir) == [1, 2, 3]


def test_overwrite_and_resume_exclude_each_other(tmp_path: Path) -> None:
    err = _refused(runs.args(tmp_path, "x", "none", 1, "--overwrite", "--resume", "auto")).stderr
    assert "argument --resume: not allowed with argument --overwrite" in err, err


def test_checkpoints_kept_outside_the_run_directory_count_as_the_earlier_run(tmp_path: Path) -> None:
    """checkpoint.directory elsewhere: the earlier run is its checkpoints there; --overwrite removes them (and
    only them: another run's files in that directory stay)."""
    ckpts = tmp_path / "ckpts"
    (ckpts / "ckpt.step00000002").mkdir(parents=True)
    (ckpts / "other.step00000002").mkdir()
    cfg = loading.resolve(overrides=[f"out_dir={tmp_path}", "name=r", f"checkpoint.directory={ckpts}"]).config
    with pytest.raises(
        RunExists, match=re.escape(f"{tmp_path / 'r'} already holds a run named 'r' ({ckpts / 'ckpt.step00000002'})")
    ):
        claim(cfg, None, overwrite=False)
    claim(cfg, "auto", overwrite=False)  # continuing it is no new run
    claim(cfg, None, overwrite=True)
    assert sorted(p.name for p in ckpts.iterdir()) == ["other.step00000002"]
    claim(cfg, None, overwrite=False)  # nothing of it left: a new run starts
