"""benchmarks/overlap.py: the overlap figures on a hand-made trace (exact), and a smoke run --quick on 2
real ranks (DDP, mbsgd, and mbsgd with overlap_backward=False, whose overlap is 0 by construction): every
field is in the JSON, the PNG is written. No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import overlap
from benchmarks.overlap_trace import backward_overlap
from benchmarks.workers.overlap_run import BACKWARD

FIELDS = {
    "case",
    "comm",
    "backward_ms",
    "backward_compute_ms",
    "comm_ms",
    "comm_in_backward_ms",
    "overlapped_ms",
    "overlap_of_backward",
    "overlap_of_comm",
    "overlap_of_backward_per_rank",
    "step_s",
}


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_figures_of_a_hand_made_trace() -> None:
    # backward 0-100 us on thread 1: backward functions 0-30 and 50-70 (AccumulateGrad and aten ops are not
    # backward's computation); gloo work 20-60 on gloo's thread, and 90-120 (partly after backward)
    events = [
        x(BACKWARD, 0, 100, "user_annotation"),
        x("MmBackward0", 0, 30),
        x("GeluBackward0", 50, 20),
        x("torch::autograd::AccumulateGrad", 30, 15),
        x("aten::mm", 75, 10),
        x("MmBackward0", 200, 10),  # outside backward
        x("NativeLayerNormBackward0", 10, 5, tid=2),  # another thread
        x("gloo:all_reduce", 20, 40, "user_annotation", tid=3),
        x("gloo:all_reduce", 90, 30, "user_annotation", 3),
    ]
    got = backward_overlap({"traceEvents": events}, BACKWARD, "gloo")
    assert got == pytest.approx(
        {
            "backward_ms": 0.1,
            "backward_compute_ms": 0.05,
            "comm_ms": 0.07,
            "comm_in_backward_ms": 0.05,
            "overlapped_ms": 0.02,
            "overlap_of_backward": 0.4,
            "overlap_of_comm": 2 / 7,
        }
    )
    # pycomm's ops (submission to completion) against their active phases (queued left out)
    events = [
        x(BACKWARD, 0, 100, "user_annotation"),
        x("MmBackward0", 0, 100),
        x("allreduce", 10, 50, "pycomm", 5),
        x("queued", 10, 20, "pycomm.phase", 5),
        x("wire", 30, 30, "pycomm.phase", 5),
    ]
    assert backward_overlap(events, BACKWARD, "pycomm")["overlap_of_backward"] == pytest.approx(0.5)
    assert backward_overlap(events, BACKWARD, "pycomm_active")["overlap_of_backward"] == pytest.approx(0.3)


def test_bad_source_and_missing_backward_are_named() -> None:
    with pytest.raises(ValueError, match="source must be one of gloo, pycomm, pycomm_active, got 'nccl'"):
        backward_overlap([x(BACKWARD, 0, 1, "user_annotation")], BACKWARD, "nccl")
    with pytest.raises(ValueError, match="no 'overlap::backward' annotation"):
        backward_overlap([x("MmBackward0", 0, 1)], BACKWARD, "gloo")


@pytest.mark.mpi
def test_overlap_benchmark_quick(tmp_path: Path) -> None:
    cases = ["torch_ddp", "mbsgd", "mbsgd_after_backward"]
    payload = overlap.main(["--quick", "--cases", *cases, "--results-dir", str(tmp_path)])
    doc = json.loads((tmp_path / "overlap.json").read_text())
    assert (tmp_path / "overlap.png").stat().st_size > 0
    assert doc["environment"]["load_average"] and doc["ranks"] == 2
    assert {(r["case"], r["comm"]) for r in doc["rows"]} == {
        ("torch_ddp", "gloo"),
        ("mbsgd", "pycomm"),
        ("mbsgd", "pycomm_active"),
        ("mbsgd_after_backward", "pycomm"),
        ("mbsgd_after_backward", "pycomm_active"),
    }
    for r in doc["rows"]:
        assert FIELDS <= set(r), r
        assert r["backward_compute_ms"] > 0 and r["comm_ms"] > 0 and r["step_s"] > 0, r
        assert len(r["overlap_of_backward_per_rank"]) == 2
        if r["case"] == "mbsgd_after_backward":  # no reduction starts before backward's last gradient
            assert r["overlapped_ms"] == 0
    assert {"ddp_overlap_of_backward", "mbsgd_overlap_of_backward", "mbsgd_goal_met"} <= set(doc["goals"])
    assert payload["goals"] == doc["goals"]
