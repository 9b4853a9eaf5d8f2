"""`python -m apps.train --trace A:B` on 2 real ranks (mpirun through --nproc): the run directory gets the
merged torch.profiler + pycomm trace, one file per rank that Holistic Trace Analysis loads (both ranks, the
captured ProfilerStep markers, pycomm's ops and phases), the summary's overlap and top-op lines, and the
timeline PNG; `python -m apps.plot TRACE.json` draws it again; a malformed --trace is refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps import hta_analyses, runs
from tests.launch import ROOT, worker_env


@pytest.mark.mpi
def test_trace_window_of_a_two_rank_run(tmp_path: Path) -> None:
    argv = runs.args(tmp_path, "traced", "mbsgd", 2, "-o", "train.max_steps=6", "--trace", "2:5")
    out = runs.run(argv, timeout=400).stdout
    trace_dir = tmp_path / "traced" / "trace"
    assert f"trace of steps 2-4: {trace_dir / 'trace.json'}" in out, out
    for r in (0, 1):
        m = re.search(rf"rank {r}: communication ([\d.]+) ms, ([\d.]+)% of it under computation", out)
        assert m and float(m.group(1)) > 0 and 0 <= float(m.group(2)) <= 100, out
    assert re.search(r"allreduce: \d+ calls, [\d.]+ ms", out), out
    assert (trace_dir / "timeline.png").stat().st_size > 10_000
    merged = json.loads((trace_dir / "trace.json").read_text())["traceEvents"]
    names = {e.get("name") for e in merged}
    assert {"allreduce", "wire", "ProfilerStep#1"} <= names, sorted(n for n in names if n)[:50]
    assert any(e.get("cat") == "cpu_op" for e in merged)  # torch's computation, on the same timeline
    hta = pytest.importorskip("hta.trace_analysis")
    analysis = hta.TraceAnalysis(trace_dir=str(trace_dir / "ranks"))
    assert sorted(analysis.t.traces) == [0, 1]
    symbols = analysis.t.symbol_table.get_sym_table()
    for rank, df in analysis.t.traces.items():
        seen = {symbols[i] for i in df["name"].unique()}
        assert {"allreduce", "queued", "wire"} <= seen, (rank, sorted(seen)[:40])
    steps = analysis.get_profiler_steps()  # of the 3 captured steps, those HTA finds whole on every rank
    assert steps and set(steps) <= {0, 1, 2}, steps
    ours, torchs = (
        hta_analyses.outcomes(trace_dir / "ranks"),
        hta_analyses.outcomes(hta_analyses.torch_cpu_trace(tmp_path / "torch_trace")),
    )
    assert [n for n in torchs if torchs[n] == "ok" and ours[n] != "ok"] == [], (ours, torchs)
    tracing_doc = (ROOT / "docs" / "tracing.md").read_text()
    for name, outcome in ours.items():  # the doc says which run on CPU traces and which need GPU kernels
        assert re.search(rf"`{name}`[^\n]*\| {'runs' if outcome == 'ok' else 'fails'}", tracing_doc), (name, outcome)
    png = tmp_path / "again.png"
    drawn = subprocess.run(
        [sys.executable, "-m", "apps.plot", str(trace_dir / "trace.json"), "--out", str(png)],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert drawn.returncode == 0 and png.stat().st_size > 10_000, drawn.stderr


def test_a_malformed_trace_window_is_a_config_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "apps.train", "-o", f"out_dir={tmp_path}", "--trace", "5"],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--trace takes STEPS as A:B" in proc.stderr, proc.stderr
