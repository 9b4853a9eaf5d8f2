"""Metrics files, resume truncation, the progress line, optional TensorBoard / W&B."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest

from apps.config.schema import LoggingConfig
from apps.metrics import Metrics, Progress, algorithm_quantities


def _row(step: int) -> dict:
    return {
        "step": step,
        "epoch": 0,
        "segment": 0,
        "time": step * 0.1,
        "loss": 1.0 / step,
        "lr": 0.1,
        "samples_per_s": 100.0,
        "tokens_per_s": None,
        "mfu": None,
        "comm_bytes": 8 * step,
        "comm_seconds": 0.01,
        "H": 4,
    }


def test_files_and_truncation_on_resume(tmp_path: Path) -> None:
    m = Metrics(tmp_path, LoggingConfig(progress=False), 0, 10, 1, {}, None)
    for s in range(1, 7):
        m.step(_row(s))
    m.eval({"step": 6, "epoch": 0, "time": 1.0, "loss": 0.5, "accuracy": 0.9})
    m.close()
    m = Metrics(tmp_path, LoggingConfig(progress=False), 0, 10, 1, {}, resumed_at=4)  # steps 5, 6 are redone
    for s in range(5, 8):
        m.step(_row(s))
    m.close()
    assert [int(r["step"]) for r in csv.DictReader(open(tmp_path / "train.csv"))] == list(range(1, 8))
    assert [json.loads(x)["step"] for x in open(tmp_path / "train.jsonl")] == list(range(1, 8))
    assert not list(csv.DictReader(open(tmp_path / "eval.csv")))  # the eval at step 6 came after step 4


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    m = Metrics(tmp_path / "r1", LoggingConfig(), 1, 10, 1, {}, None)
    m.step(_row(1))
    m.close()
    assert not (tmp_path / "r1").exists()


def test_progress_line() -> None:
    out = io.StringIO()
    Progress(10, 0, out).show(_row(5))
    line = out.getvalue()
    assert line.startswith("step 5/10 [##########..........]  50%") and "H 4" in line and "comm 40B" in line


def test_algorithm_quantities_from_a_comm_optimizer_like_object() -> None:
    class Comm:
        size = 4

    class Opt:
        current_period = 8
        comm = Comm()

        def comm_stats(self) -> dict:
            return {"bytes": 1024, "seconds": 0.5, "calls": 3}

    assert algorithm_quantities(Opt(), 4) == {"comm_bytes": 1024, "comm_seconds": 0.5, "H": 8, "ranks": 4}
    Comm.size = 1  # independent processes (asyncps, ssp): each holds a one-rank world; the run has 3 ranks
    assert algorithm_quantities(Opt(), 3)["ranks"] == 3

    class Split(Opt):  # bytes per mesh dimension, plus a pipeline's: the columns per dimension and their total
        def comm_stats(self) -> dict:
            return {"bytes": 1024, "seconds": 0.5, "calls": 3, "bytes_by_dim": {"dp_shard": 1000, "dp": 24}}

    class Pipe:
        def comm_stats(self) -> dict:
            return {"bytes": 300, "bytes_by_dim": {"pp": 292, "dp": 8}}

    q = algorithm_quantities(Split(), 4, Pipe())
    assert (
        q["comm_bytes"],
        q["comm_bytes_pp"],
        q["comm_bytes_dp"],
        q["comm_bytes_dp_shard"],
        q["comm_bytes_dp_replicate"],
    ) == (1324, 292, 32, 1000, 0)


@pytest.mark.parametrize("module, option", [("tensorboard", {"tensorboard": True}), ("wandb", {"wandb": "offline"})])
def test_optional_loggers(tmp_path: Path, module: str, option: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = LoggingConfig(progress=False, **option)
    if importlib.util.find_spec(module) is None:
        with pytest.raises(ImportError, match=f"pip install {module}"):
            Metrics(tmp_path, cfg, 0, 10, 1, {}, None)
        return
    monkeypatch.setenv("WANDB_SILENT", "true")
    m = Metrics(tmp_path, cfg, 0, 10, 1, {"a": 1}, None)
    m.step(_row(1))
    m.close()
    assert (tmp_path / ("tensorboard" if module == "tensorboard" else "wandb")).exists()
