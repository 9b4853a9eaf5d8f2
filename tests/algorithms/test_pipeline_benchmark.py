"""Smoke test of benchmarks/pipeline.py --quick on 2 real ranks: every case (pycomm and torch
pipelining, GPipe and 1F1B) is measured, pycomm's measured bubble is the formula's, the results file
and PNG are written, and the inference section folds in benchmarks/pipeline_inference.py's results
file when one is there. No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import pipeline


@pytest.mark.mpi
def test_pipeline_benchmark_quick(tmp_path: Path) -> None:
    inference = {"benchmark": "pipeline_inference", "rows": [{"clients": 1, "case": "pipeline", "tokens_per_s": 1.0}]}
    (tmp_path / "pipeline_inference.json").write_text(json.dumps(inference))
    payload = pipeline.main(["--quick", "--stages", "2", "--repeats", "2", "--results-dir", str(tmp_path)])
    doc = json.loads((tmp_path / "pipeline.json").read_text())
    assert (tmp_path / "pipeline.png").stat().st_size > 0
    assert {r["case"] for r in doc["rows"]} == set(pipeline.CASES)
    assert all(r["samples_per_s"] > 0 for r in doc["rows"])
    for r in doc["rows"]:
        if r["case"].startswith("pycomm"):
            assert r["bubble_slots"] == pytest.approx(r["bubble_expected"])
            assert r["case"] == "pycomm_interleaved_1f1b" or r["speed_vs_torch"] > 0  # interleaved: no torch peer
    assert payload["inference"]["rows"] == inference["rows"]
    assert payload["inference"]["source"].endswith("pipeline_inference.json")


def test_quick_keeps_the_repeats_asked_for() -> None:
    assert pipeline.parse(["--quick", "--repeats", "2"]).repeats == 2
    assert pipeline.parse(["--quick"]).repeats == 5 and pipeline.parse([]).repeats == 7
    with pytest.raises(SystemExit):
        pipeline.parse(["--repeats", "0"])


def test_inference_section_absent(tmp_path: Path) -> None:
    assert pipeline.inference_section(tmp_path) is None
