"""benchmarks/algorithms_busy.py's bookkeeping: a launch past its time limit is killed with every rank it
started and recorded as a failed run, and the summary is drawn from the runs that finished (a torchrun
that hung for 900 s once cost every figure of a 17-minute benchmark)."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from benchmarks import algorithms_busy


def _ranks() -> set[int]:
    return {
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "benchmarks.workers.user_script" in " ".join(p.info["cmdline"] or [])
    }


def test_a_launch_past_its_limit_is_killed_with_its_ranks():
    before = _ranks()  # another benchmark's, on a shared machine
    with pytest.raises(subprocess.TimeoutExpired):
        # 1000 epochs cannot finish in 12 s on any machine (one takes seconds on an idle 2-core one); the
        # ranks are up by then
        algorithms_busy.launch("pycomm-gloo", epochs=1000, timeout=12)
    deadline = time.monotonic() + 10
    while _ranks() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ranks() - before


def test_the_summary_counts_failed_runs_and_uses_the_others():
    load = {"loadavg_1m": 1.0}
    runs = [
        {"repeat": 0, "load": "idle", "case": "ddp-mpi", "samples_per_s": 100.0, "final_loss": 0.5, **load},
        {"repeat": 0, "load": "idle", "case": "pycomm-mpi", "samples_per_s": 110.0, "final_loss": 0.5, **load},
        {"repeat": 1, "load": "idle", "case": "ddp-mpi", "samples_per_s": 120.0, "final_loss": 0.5, **load},
        {"repeat": 1, "load": "idle", "case": "pycomm-mpi", "failed": "timed out", **load},
        {"repeat": 0, "load": "idle", "case": "ddp-torchrun", "failed": "timed out", **load},
    ]
    rows = {r["case"]: r for r in algorithms_busy.summarise(runs, ["ddp-mpi", "pycomm-mpi", "ddp-torchrun"], ["idle"])}
    assert set(rows) == {"ddp-mpi", "pycomm-mpi"}  # no run of ddp-torchrun finished: no row
    mine = rows["pycomm-mpi"]
    assert mine["repeats"] == 1 and mine["failed_runs"] == 1 and mine["samples_per_s"] == 110.0
    assert mine["vs_ddp_mpi"] == pytest.approx(110.0 / 110.0) and mine["vs_ddp_mpi_paired"] == pytest.approx(1.1)
    assert mine["goal"] == ">= 1.0x DDP: met"
