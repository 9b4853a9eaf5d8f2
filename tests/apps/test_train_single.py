"""`python -m apps.train` as one process: a full run, preemption by SIGTERM, a resume that ends with
exactly the parameters of an uninterrupted run, and a resume of a finished run that says so."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.apps import runs

PLOT = ("-o", "logging.plot=true")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One whole 60-step run, plots on, and its output: the tests that only read a finished run share it
    (one start of python and torch less each); a test that runs it again works on a copy."""
    out = tmp_path_factory.mktemp("finished")
    return out / "a", runs.run(runs.args(out, "a", "none", 1, *PLOT)).stdout


def test_run_leaves_metrics_checkpoints_and_plots(finished: tuple[Path, str]) -> None:
    run_dir, stdout = finished
    assert "step 60/60" in stdout and "eval @ step" in stdout
    rows = list(csv.DictReader(open(run_dir / "train.csv")))
    assert [int(r["step"]) for r in rows] == list(range(1, 61))
    assert {"loss", "lr", "samples_per_s", "comm_bytes", "H", "segment"} <= rows[0].keys()
    assert {int(r["segment"]) for r in rows} == {0, 1}  # segments of 1,000 samples: 31 steps each
    evals = [json.loads(line) for line in open(run_dir / "eval.jsonl")]
    assert evals[-1]["step"] == 60 and evals[-1]["accuracy"] > 0.5
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert "ckpt.step00000060" in ckpts and any(n.startswith("ckpt.best.") for n in ckpts)
    assert (run_dir / "loss_vs_step.png").stat().st_size > 0 and (run_dir / "accuracy_vs_step.png").exists()


def test_sigterm_saves_preempt_and_resume_matches_uninterrupted(tmp_path: Path, finished: tuple[Path, str]) -> None:
    shutil.copytree(finished[0], tmp_path / "straight")  # the finished run, as a copy: resumed below
    straight = runs.args(tmp_path, "straight", "none", 1, *PLOT)
    again = runs.run(straight + ["--resume", "auto"]).stdout  # resuming a finished run trains nothing
    assert "already finished: the run resumed at step 60 of 60, so nothing was trained" in again, again
    assert "done:" not in again, again
    argv = runs.args(tmp_path, "cut", "none", 1)
    out = runs.preempt(argv).stdout
    assert "preempted (signal 15)" in out, out
    preempts = list((tmp_path / "cut" / "checkpoints").glob("*.preempt"))
    assert len(preempts) == 1
    stopped_at = int(preempts[0].name.split("step")[1].split(".")[0])
    assert 10 <= stopped_at < 60
    resumed = runs.run(argv + ["--resume", "auto"]).stdout
    assert f"resumed from {preempts[0]}" in resumed
    runs.assert_same(runs.final_params(tmp_path / "straight"), runs.final_params(tmp_path / "cut"))
    steps = [int(r["step"]) for r in csv.DictReader(open(tmp_path / "cut" / "train.csv"))]
    assert steps == list(range(1, 61))  # the log continues without gaps or repeats


def test_plot_compares_runs(tmp_path: Path, finished: tuple[Path, str]) -> None:
    proc = runs.run(["-m", "apps.plot", str(finished[0]), str(finished[0]), "--out", str(tmp_path / "cmp")])
    assert (tmp_path / "cmp" / "loss_vs_time.png").exists() and "loss_vs_step.png" in proc.stdout


def test_lppsgd_trains_through_its_worker_processes(tmp_path: Path) -> None:
    proc = runs.run(
        runs.args(
            tmp_path,
            "lpp",
            "lppsgd",
            1,
            "-o",
            "algorithm.options={num_processes: 2, averaging_freq: 4, prepassm_steps: 20}",
            "-o",
            "train.max_steps=40",
        )
    )
    assert "step 40/40" in proc.stdout
    rows = list(csv.DictReader(open(tmp_path / "lpp" / "train.csv")))
    assert int(rows[-1]["step"]) == 40 and rows[-1]["H"] == "4"
    assert (tmp_path / "lpp" / "checkpoints" / "ckpt.step00000040" / "optim_state_dict.pt").exists()


def test_gpt_on_a_text_file_logs_tokens_per_second(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("To be, or not to be, that is the question.\n" * 200)
    runs.run(
        runs.args(
            tmp_path,
            "gpt",
            "none",
            1,
            "-o",
            "model.name=gpt",
            "-o",
            "data.name=text",
            "-o",
            f"data.path={tmp_path / 't.txt'}",
            "-o",
            "data.options={block_size: 16}",
            "-o",
            "model.options={n_layer: 1, n_head: 2, n_embd: 32}",
            "-o",
            "data.segment_size=null",
            "-o",
            "train.max_steps=6",
            "-o",
            "optim.name=adamw",
            "-o",
            "optim.lr=1e-3",
        )
    )
    rows = list(csv.DictReader(open(tmp_path / "gpt" / "train.csv")))
    assert len(rows) == 6 and float(rows[-1]["tokens_per_s"]) == float(rows[-1]["samples_per_s"]) * 16


def test_vit_on_the_stub_random_tensors_in_segments(tmp_path: Path) -> None:
    runs.run(
        runs.args(
            tmp_path,
            "vit",
            "none",
            1,
            "-o",
            "model.name=vit",
            "-o",
            "data.name=random",
            "-o",
            "data.options={num_samples: 256, eval_samples: 32, shape: [3, 8, 8], num_classes: 4}",
            "-o",
            "model.options={patch_size: 4, dim: 16, depth: 1, heads: 2}",
            "-o",
            "data.batch_size=16",
            "-o",
            "data.segment_size=64",
            "-o",
            "train.max_steps=12",
        )
    )
    rows = list(csv.DictReader(open(tmp_path / "vit" / "train.csv")))
    assert [int(r["segment"]) for r in rows] == [0] * 4 + [1] * 4 + [2] * 4
    state = torch.load(tmp_path / "vit" / "checkpoints" / "ckpt.step00000010" / "iter_state_dict.pt")
    assert (state["segment"], state["start_idx"], state["end_idx"], state["sample_in_segment"]) == (2, 128, 192, 32)


def test_sigterm_repeated_after_the_preempt_save_still_exits_0(tmp_path: Path) -> None:
    """A scheduler that signals again while the run shuts down must not kill it with the default action."""
    proc = runs.preempt_repeatedly(runs.args(tmp_path, "again", "none", 1))
    assert proc.returncode == 0, proc.stdout
    assert len(list((tmp_path / "again" / "checkpoints").glob("*.preempt"))) == 1, proc.stdout
