"""What a merged trace (pycomm.profile(..., torch=True), apps.train --trace) says: per rank, how much of
its communication ran under computation, and the ops that took the most time.

Communication: the active phases of pycomm's ops (op_check, wait_peers, wire; not queued), merged per
rank. Computation: torch's operators on the rank's process (category cpu_op with an `aten::` name, and
GPU kernels), merged. Overlap ratio = |communication n computation| / |communication|, as Holistic
Trace Analysis defines its comm/comp overlap (HTA counts GPU kernels only; on CPU ranks it has nothing
to count, so pycomm computes it from the same definitions here)."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from pycomm.tracing.chrome import OP_CATEGORY, PHASE_CATEGORY

ACTIVE_PHASES = ("op_check", "wait_peers", "wire")


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def total(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def intersection(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    out = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if hi > lo:
            out += hi - lo
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _rank_of(pid: int) -> int:
    return pid % 10_000  # trace_merge: a rank's extra process rows are 10000 * k + rank


def is_computation(e: dict) -> bool:
    cat = e.get("cat", "")
    return (cat == "cpu_op" and str(e.get("name", "")).startswith("aten::")) or cat == "kernel"


def overlap(trace_events: list[dict]) -> dict[int, dict[str, float]]:
    """{rank: {"communication_ms", "computation_ms", "overlapped_ms", "overlap_ratio"}} of a merged trace."""
    comm: dict[int, list] = defaultdict(list)
    comp: dict[int, list] = defaultdict(list)
    for e in trace_events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if e.get("cat") == PHASE_CATEGORY and e.get("name") in ACTIVE_PHASES:
            comm[_rank_of(e["pid"])].append(span)
        elif is_computation(e):
            comp[_rank_of(e["pid"])].append(span)
    out = {}
    for rank in sorted(set(comm) | set(comp)):
        c, p = merge_intervals(comm[rank]), merge_intervals(comp[rank])
        both = intersection(c, p)
        out[rank] = {
            "communication_ms": total(c) / 1e3,
            "computation_ms": total(p) / 1e3,
            "overlapped_ms": both / 1e3,
            "overlap_ratio": both / total(c) if c else 0.0,
        }
    return out


def top_ops(trace_events: list[dict], n: int = 5) -> list[dict]:
    """pycomm's ops over every rank, by total time (submission to completion), most first."""
    rows: dict[str, dict] = {}
    for e in trace_events:
        if e.get("ph") == "X" and e.get("cat") == OP_CATEGORY:
            r = rows.setdefault(e["name"], {"name": e["name"], "calls": 0, "ms": 0.0, "bytes": 0})
            r["calls"] += 1
            r["ms"] += float(e["dur"]) / 1e3
            r["bytes"] += int(e.get("args", {}).get("bytes", 0))
    return sorted(rows.values(), key=lambda r: -r["ms"])[:n]


def describe(trace_events: list[dict], n: int = 5) -> list[str]:
    """Lines for a run's summary: overlap per rank, then the top ops."""
    lines = []
    for rank, o in overlap(trace_events).items():
        lines.append(
            f"rank {rank}: communication {o['communication_ms']:.1f} ms, {100 * o['overlap_ratio']:.1f}% "
            f"of it under computation ({o['overlapped_ms']:.1f} ms); computation {o['computation_ms']:.1f} ms"
        )
    for r in top_ops(trace_events, n):
        lines.append(f"{r['name']}: {r['calls']} calls, {r['ms']:.1f} ms, {r['bytes'] / 1e6:.2f} MB (all ranks)")
    return lines
