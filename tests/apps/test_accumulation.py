"""Gradient accumulation (data.physical_batch_size), BatchNorm re-estimation (train.bn_batches) and
train.eval_on_start: on real ranks, and in short real runs of `python -m apps.train`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.apps import runs
from tests.launch import mpirun


@pytest.mark.mpi
def test_micro_batches_give_the_whole_batch_gradient_and_mbsgd_waits_for_the_last() -> None:
    mpirun(2, "tests.apps.workers.accumulate", timeout=200)


@pytest.mark.mpi
def test_batchnorm_statistics_are_reestimated_and_averaged_over_ranks() -> None:
    mpirun(2, "tests.apps.workers.bn_reestimate", timeout=200)


def test_a_run_with_micro_batches_trains_like_one_without(tmp_path: Path) -> None:
    short = ("-o", "train.max_steps=20", "-o", "logging.csv=false")
    runs.run(runs.args(tmp_path, "whole", "none", 1, *short))
    accumulated = runs.run(runs.args(tmp_path, "micro", "none", 1, *short, "-o", "data.physical_batch_size=8"))
    assert "gradient accumulation: 4 micro-batches of 8 per step (data.batch_size=32 per rank" in accumulated.stderr
    whole, micro = runs.final_params(tmp_path / "whole"), runs.final_params(tmp_path / "micro")
    assert whole.keys() == micro.keys()
    for k in whole:
        assert torch.allclose(whole[k], micro[k], atol=1e-4), f"{k}: max |diff| {(whole[k] - micro[k]).abs().max()}"
    rows = [json.loads(line) for line in open(tmp_path / "micro" / "train.jsonl")]
    assert len(rows) == 20 and rows[-1]["loss"] < rows[0]["loss"]  # it trains


def test_eval_on_start_evaluates_the_initial_model(tmp_path: Path) -> None:
    runs.run(
        runs.args(
            tmp_path,
            "e",
            "none",
            1,
            "-o",
            "train.max_steps=3",
            "-o",
            "train.eval_on_start=true",
            "-o",
            "train.bn_batches=2",
        )
    )
    steps = [json.loads(line)["step"] for line in open(tmp_path / "e" / "eval.jsonl")]
    assert steps[0] == 0 and steps[-1] == 3, steps
