"""Overlap of gradient communication with backward: the char GPT on 2 ranks (2 cores), torch DDP (gloo)
against pycomm's mbsgd and zero2, in one run (benchmarks/workers/overlap_run.py), each profiled: DDP by
torch.profiler, pycomm by pycomm.profile(torch=True). Per case, summed over the ranks and the profiled steps
(benchmarks/overlap_trace.py defines the figures): overlap_of_backward = the time backward's functions
computed while a gradient reduction was in flight (DDP: gloo's work from creation to completion; pycomm:
each op from submission to completion, and its active phases alone) / backward's compute time. Also
mbsgd and zero2 with overlap_backward=False (every reduction started after backward): the floor, 0 by
construction, which checks the measurement. Goal: pycomm's overlap >= DDP's.
On 2 ranks per 2 cores no core is free while both ranks compute: a reduction in flight during backward
takes its CPU time (the progress thread's, gloo's worker's) from the ranks' compute, so overlap shows as
concurrency on the timeline, not as a shorter step; seconds per step are reported beside it.
Writes results/overlap.json, a table and a PNG.

    python -m benchmarks.overlap             # 6 x 384, context 256, 8 sequences per rank, 3 profiled steps
    python -m benchmarks.overlap --quick     # 2 x 128, context 64, 2 sequences, 1 step: a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.algorithms import free_port
from benchmarks.harness import plot_if_matplotlib, save, table
from benchmarks.overlap_trace import backward_overlap
from benchmarks.run_ranks import mpirun
from benchmarks.workers.overlap_run import BACKWARD, CASES, PYCOMM

RANKS = 2
SUMMED = ("backward_ms", "backward_compute_ms", "comm_ms", "comm_in_backward_ms", "overlapped_ms")


def sources(case: str) -> tuple[str, ...]:
    return ("gloo",) if case == "torch_ddp" else ("pycomm", "pycomm_active")


def case_rows(case: str, directory: Path) -> list[dict[str, Any]]:
    """One row per communication source of `case`: its figures summed over the ranks' traces."""
    traces = [json.loads((directory / "ranks" / f"rank{r}.json").read_text()) for r in range(RANKS)]
    seconds = [s for r in range(RANKS) for s in json.loads((directory / f"seconds{r}.json").read_text())]
    rows = []
    for source in sources(case):
        per_rank = [backward_overlap(t, BACKWARD, source) for t in traces]
        row: dict[str, Any] = {"case": case, "comm": source, **{k: sum(r[k] for r in per_rank) for k in SUMMED}}
        row["overlap_of_backward"] = row["overlapped_ms"] / row["backward_compute_ms"]
        row["overlap_of_comm"] = row["overlapped_ms"] / row["comm_ms"] if row["comm_ms"] else 0.0
        row["overlap_of_backward_per_rank"] = [r["overlap_of_backward"] for r in per_rank]
        row["step_s"] = statistics.median(seconds)
        rows.append(row)
    return rows


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each overlapping pycomm row's overlap_of_backward against DDP's (overlap_vs_ddp), where DDP was
    measured (not the _after_backward floors: 0 by construction)."""
    ddp = next((r["overlap_of_backward"] for r in rows if r["case"] == "torch_ddp"), None)
    for r in rows:
        if r["case"] in PYCOMM and ddp:
            r["overlap_vs_ddp"] = r["overlap_of_backward"] / ddp
    return rows


def goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """pycomm's overlap (in flight, as DDP's is measured) against DDP's, per algorithm."""
    by = {(r["case"], r["comm"]): r["overlap_of_backward"] for r in rows}
    ddp = by.get(("torch_ddp", "gloo"))
    out: dict[str, Any] = {"ddp_overlap_of_backward": ddp}
    for name in ("mbsgd", "zero2"):
        mine = by.get((name, "pycomm"))
        if mine is not None and ddp is not None:
            out[f"{name}_overlap_of_backward"] = mine
            out[f"{name}_vs_ddp"] = mine / ddp if ddp else None
            out[f"{name}_goal_met"] = mine >= ddp
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per case (after 2 warm-up steps)")
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--quick", action="store_true", help="2 layers, 128 wide, context 64, 2 sequences, 1 step")
    ap.add_argument("--name", default="overlap", help="results/<name>.json and .png")
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument(
        "--traces",
        type=Path,
        default=None,
        help="analyse the traces a run left in this folder (printed by it) instead of measuring",
    )
    a = ap.parse_args(argv)
    if a.quick:
        a.n_layer, a.n_embd, a.block, a.batch, a.steps = 2, 128, 64, 2, 1
    out = a.traces or Path(tempfile.mkdtemp(prefix="bench-overlap-"))
    if a.traces is None:
        print(f"traces: {out}")
        mpirun(
            RANKS,
            "benchmarks.workers.overlap_run",
            str(out),
            str(a.steps),
            str(a.n_layer),
            str(a.n_embd),
            str(a.block),
            str(a.batch),
            *a.cases,
            timeout=1800,
            env={"BENCH_PORT": str(free_port())},
        )
    rows = with_ratios([row for case in a.cases for row in case_rows(case, out / case)])
    print(
        table(
            rows,
            [
                "case",
                "comm",
                "overlap_of_backward",
                "overlap_vs_ddp",
                "overlap_of_comm",
                "backward_compute_ms",
                "overlapped_ms",
                "comm_ms",
                "comm_in_backward_ms",
                "backward_ms",
                "step_s",
            ],
        )
    )
    summary = goals(rows)
    print(json.dumps(summary, indent=1))

    def plot(ax: Any) -> None:
        names = [f"{r['case']}\n({r['comm']})" for r in rows]
        ax.bar(names, [100 * r["overlap_of_backward"] for r in rows], color="tab:blue", alpha=0.7)
        ax.set_ylabel("% of backward's compute time with a reduction in flight")
        ax.tick_params(axis="x", rotation=60, labelsize=7)
        step = ax.twinx()
        step.plot(names, [r["step_s"] for r in rows], "o", color="tab:red", label="seconds per step (median)")
        step.set_ylabel("seconds per step")
        step.legend(loc="upper right")
        ax.set_title(
            f"GPT {a.n_layer}x{a.n_embd}, context {a.block}, batch {a.batch}, {RANKS} ranks on "
            f"{RANKS} cores (busy machine)"
        )

    payload = {"config": vars(a) | {"results_dir": str(a.results_dir)}, "ranks": RANKS, "rows": rows, "goals": summary}
    print(save(a.name, payload, plot_if_matplotlib(plot), results_dir=a.results_dir))
    return payload


if __name__ == "__main__":
    main()
