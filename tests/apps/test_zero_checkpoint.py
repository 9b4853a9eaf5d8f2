"""Checkpoints of sharded algorithms (ZeRO) in apps.train: checkpoint.state_dict_type=sharded writes
one optimizer shard per rank beside the full model and resumes on any number of ranks; full writes the
gathered state once; same-N resume is bit-exact."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import algorithms
from algorithms import traits
from apps.loop_support import state_kinds
from tests.apps import runs
from tests.launch import mpirun

ADAMW = ["-o", "optim.name=adamw", "-o", "optim.lr=0.001", "-o", "train.max_steps=20"]


def _argv(out: Path, name: str, algorithm: str, nproc: int, state_dict_type: str, *extra: str) -> list[str]:
    return runs.args(out, name, algorithm, nproc, *ADAMW, "-o", f"checkpoint.state_dict_type={state_dict_type}", *extra)


class _ShardedRuns(dict):
    """{algorithm: the directory of an uninterrupted 2-rank run with sharded checkpoints}, trained when first
    asked for: the reshard test reads its step-10 checkpoint, the preemption test compares with its end."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, algorithm: str) -> Path:
        out = self.factory.mktemp(f"{algorithm}-sharded")
        runs.run(_argv(out, "sharded", algorithm, 2, "sharded"), timeout=400)
        self[algorithm] = out / "sharded"
        return self[algorithm]


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory: pytest.TempPathFactory) -> _ShardedRuns:
    return _ShardedRuns(tmp_path_factory)


def test_sharded_algorithms_save_the_optimizer_per_rank_only_when_sharded() -> None:
    identical, sharded = traits.IDENTICAL, traits.SHARDED
    assert state_kinds(algorithms.lookup("zero3"), {}, "sharded") == {
        "model_state_dict": identical,
        "optim_state_dict": sharded,
    }
    assert state_kinds(algorithms.lookup("zero2"), {}, "full") == {
        "model_state_dict": identical,
        "optim_state_dict": identical,
    }
    assert state_kinds(algorithms.lookup("mbsgd"), {}, "sharded")["optim_state_dict"] == identical  # moot type


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["zero3", "zero2"])
def test_sharded_checkpoint_resumes_on_1_and_3_ranks_to_the_saved_state(
    tmp_path: Path, algorithm: str, sharded_runs: _ShardedRuns
) -> None:
    runs.run(_argv(tmp_path, "full", algorithm, 2, "full"), timeout=400)
    sharded = sharded_runs[algorithm] / "checkpoints" / "ckpt.step00000010"
    full = tmp_path / "full" / "checkpoints" / "ckpt.step00000010"
    assert (sharded / "optim_state_dict.rank1.pt").exists() and not (sharded / "model_state_dict.rank1.pt").exists()
    assert not (full / "optim_state_dict.rank1.pt").exists()
    model = torch.load(sharded / "model_state_dict.pt", weights_only=True)
    assert all(v.numel() > 0 for v in model.values())  # the real model, not zero3's empty live parameters
    runs.assert_same(model, torch.load(full / "model_state_dict.pt", weights_only=True))
    overrides = [
        f"algorithm.name={algorithm}",
        "algorithm.options={}",
        "model.name=mlp",
        "optim.name=adamw",
        "optim.lr=0.001",
        "logging.plot=false",
        "data.segment_size=1000",
    ]
    for n in (1, 3):  # from either checkpoint, the gathered state after loading equals the full checkpoint's
        out = mpirun(
            n,
            "tests.apps.workers.zero_reshard",
            str(tmp_path / f"w{n}"),
            str(full),
            f"{sharded},{full}",
            *overrides,
            timeout=400,
        ).stdout
        for source in ("sharded", "full"):
            assert len(re.findall(rf"rank \d of {n} ok: {source}", out)) == n, out  # lines of ranks may run together


@pytest.mark.mpi
def test_preempted_zero3_resumes_bit_exact_on_2_and_runs_on_3_ranks(tmp_path: Path, sharded_runs: _ShardedRuns) -> None:
    argv = _argv(tmp_path, "cut", "zero3", 2, "sharded")
    assert "preempted" in runs.preempt(argv, timeout=400).stdout
    shutil.copytree(tmp_path / "cut", tmp_path / "cut3")
    runs.run(argv + ["--resume", "auto"], timeout=400)
    runs.assert_same(runs.final_params(sharded_runs["zero3"]), runs.final_params(tmp_path / "cut"))
    argv3 = _argv(tmp_path, "cut3", "zero3", 3, "sharded")
    out = runs.run(argv3 + ["--resume", "auto"], timeout=400).stdout
    # 10 of 20 steps of 2 x 32 samples done: 640 samples left, 6 whole steps of 3 x 32, then the end
    # (tests/apps/test_resume_resize.py checks samples and schedule where the global batches divide)
    planned = re.search(r"over 3 rank\(s\) on cpu, (\d+) steps", out)
    assert "resumed from" in out and planned and f"done: {planned[1]} steps" in out, out
