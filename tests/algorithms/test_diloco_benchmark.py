"""Smoke tests of benchmarks/diloco.py (and its sweep) on 2 real ranks: 20 steps of mbsgd and diloco (H = 64, int4)
on a small generated text and a small GPT, then the JSON it writes (ratios against mbsgd, the goal, bytes sent
while training: none for diloco before its first round) and the PNG. No timing assertions."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import algorithms_gpt, diloco, diloco_sweep
from tests import pseudo_text

_LAUNCHED: dict[str, dict[str, Any]] = {}


_LAUNCH = inspect.signature(algorithms_gpt.launch)


def launch_once(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """algorithms_gpt.launch, each distinct launch made once per session: both smoke tests run the same mbsgd
    reference (same steps, batch, data, seed and model), and a launch costs ~20 s of CPU for a second of
    training. A case's result is deterministic for its arguments (the timeout aside)."""
    call = _LAUNCH.bind(*args, **kwargs)
    call.apply_defaults()
    named = {**call.arguments, "overrides": call.arguments["overrides"] or {}}
    del named["timeout"]
    key = json.dumps(named, sort_keys=True, default=str)
    if key not in _LAUNCHED:
        _LAUNCHED[key] = algorithms_gpt.launch(*args, **kwargs)
    return _LAUNCHED[key]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data directory for both tests (the text's path is part of a launch's arguments)."""
    data = tmp_path_factory.mktemp("diloco") / "data"
    pseudo_text.write(data / "tinyshakespeare" / "input.txt")
    return data


@pytest.fixture(autouse=True)
def shared_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diloco, "launch", launch_once)
    monkeypatch.setattr(diloco_sweep, "launch", launch_once)


@pytest.mark.mpi
def test_diloco_benchmark_smoke(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "results"
    diloco.main(
        [
            "--ranks",
            "2",
            "--steps",
            "20",
            "--batch",
            "2",
            "--n-layer",
            "1",
            "--n-embd",
            "32",
            "--n-head",
            "2",
            "--seeds",
            "1",
            "--cases",
            "diloco-h64+int4",
            "--links",
            "default",
            "--data-dir",
            str(data_dir),
            "--results-dir",
            str(out),
            "--timeout",
            "300",
        ]
    )
    doc = json.loads((out / "diloco.json").read_text())
    assert (out / "diloco.png").stat().st_size > 0
    assert (doc["ranks"], doc["steps"], doc["seeds"], doc["reference"]) == (2, 20, 1, "mbsgd")
    assert [r["case"] for r in doc["runs"]] == ["mbsgd", "diloco-h64+int4"] and all("result" in r for r in doc["runs"])
    rows = {r["case"]: r for r in doc["results"]["default"]}
    for row in rows.values():
        assert set(diloco.COLUMNS) - {"goal"} <= set(row), set(diloco.COLUMNS) - set(row)
        assert math.isfinite(row["eval_loss"]) and row["samples_per_s"] > 0 and row["seeds"] == 1
    runs = {r["case"]: r["result"] for r in doc["runs"]}
    assert runs["mbsgd"]["bytes_sent"] == 20 * 4 * runs["mbsgd"]["parameters"]  # fp32 gradients every step
    assert runs["diloco-h64+int4"]["bytes_sent"] == 0  # no round in 20 steps (H = 64)
    assert rows["mbsgd"]["eval_loss_vs_mbsgd"] == 1.0 and "goal" not in rows["mbsgd"]
    d = rows["diloco-h64+int4"]
    assert d["eval_loss_vs_mbsgd"] == pytest.approx(d["eval_loss"] / rows["mbsgd"]["eval_loss"])
    assert d["speedup_vs_mbsgd"] == pytest.approx(d["samples_per_s"] / rows["mbsgd"]["samples_per_s"])
    assert d["goal"].startswith("loss <= 1.02x, >= 200x fewer bytes: ") and d["goal"].endswith("met")


@pytest.mark.mpi
def test_diloco_sweep_smoke(tmp_path: Path, data_dir: Path) -> None:
    """benchmarks/diloco_sweep.py's QSR variant reaches the worker: in 20 steps it makes two outer rounds
    (H 16 through the 2 warm-up steps' period, then the 4 steps left), where the case it overrides (H = 16)
    makes one; an int4 round sends a little over half a byte per parameter."""
    out = tmp_path / "results"
    diloco_sweep.main(
        [
            "--ranks",
            "2",
            "--steps",
            "20",
            "--batch",
            "2",
            "--n-layer",
            "1",
            "--n-embd",
            "32",
            "--n-head",
            "2",
            "--variants",
            "diloco-qsr+int4",
            "--data-dir",
            str(data_dir),
            "--results-dir",
            str(out),
            "--timeout",
            "300",
        ]
    )
    doc = json.loads((out / "diloco_sweep.json").read_text())
    assert (out / "diloco_sweep.png").stat().st_size > 0
    runs = {r["case"]: r for r in doc["runs"]}
    assert list(runs) == ["mbsgd", "diloco-qsr+int4"] and all("result" in r for r in runs.values())
    assert runs["diloco-qsr+int4"]["options"]["inner_steps"] == "qsr"
    params = runs["mbsgd"]["result"]["parameters"]
    assert params < runs["diloco-qsr+int4"]["result"]["bytes_sent"] < 1.5 * params  # two rounds, not one
    rows = {r["case"]: r for r in doc["results"]}
    assert rows["diloco-qsr+int4"]["eval_loss_vs_mbsgd"] == pytest.approx(
        rows["diloco-qsr+int4"]["eval_loss"] / rows["mbsgd"]["eval_loss"]
    )
