"""How much of backward a rank's communication overlapped, read from one rank's chrome trace (torch.profiler's
or pycomm.profile(torch=True)'s): the figures of benchmarks/overlap.py.

- backward: the intervals of the user annotation that wraps each `loss.backward()` (the whole call, so
  the wait for the last buckets when backward has finished is inside it);
- backward computation: autograd's backward functions (`MmBackward0`, ...: the gradients' computation, not
  AccumulateGrad and the hooks after it, where DDP and pycomm pack and launch buckets) on backward's thread
  within those intervals;
- communication, by its source: "gloo" (torch's gloo work: each `gloo:*` record, from the work's creation to
  its completion), "pycomm" (each pycomm op from submission to completion, as gloo's) and "pycomm_active"
  (the active phases only: op_check, wait_peers, wire; not queued).

overlap_of_backward = |communication n backward computation| / |backward computation|: the share of
backward's compute time during which gradients were travelling too. overlap_of_comm = the same
intersection / |communication| (HTA's comm/comp overlap restricted to backward)."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from pycomm.tracing.analysis import ACTIVE_PHASES, intersection, merge_intervals, total
from pycomm.tracing.chrome import OP_CATEGORY, PHASE_CATEGORY

Interval = tuple[float, float]
BACKWARD_FUNCTION = re.compile(r"^[A-Za-z0-9_]+Backward\d*$")
SOURCES: dict[str, Callable[[dict], bool]] = {
    "gloo": lambda e: str(e.get("name", "")).startswith("gloo:"),
    "pycomm": lambda e: e.get("cat") == OP_CATEGORY,
    "pycomm_active": lambda e: e.get("cat") == PHASE_CATEGORY and e.get("name") in ACTIVE_PHASES,
}


def events_of(trace: Any) -> list[dict]:
    """The event list of a chrome trace (an object with traceEvents, or the bare list)."""
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def spans(events: Iterable[dict], keep: Callable[[dict], bool]) -> list[Interval]:
    return merge_intervals(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and "dur" in e and keep(e)
    )


def clipped(x: list[Interval], y: list[Interval]) -> list[Interval]:
    """The intervals of x inside y (both merged)."""
    out = []
    for a, b in x:
        for c, d in y:
            if min(b, d) > max(a, c):
                out.append((max(a, c), min(b, d)))
    return merge_intervals(out)


def backward_overlap(trace: Any, backward: str, source: str) -> dict[str, float]:
    """One rank's figures (milliseconds and ratios) for the annotation named `backward` and the
    communication of `source` (a key of SOURCES)."""
    if source not in SOURCES:
        raise ValueError(f"backward_overlap: source must be one of {', '.join(SOURCES)}, got {source!r}")
    events = events_of(trace)
    marks = [e for e in events if e.get("ph") == "X" and e.get("name") == backward]
    if not marks:
        raise ValueError(f"backward_overlap: the trace has no {backward!r} annotation (no backward to measure)")
    threads = {(e.get("pid"), e.get("tid")) for e in marks}
    bw = spans(marks, lambda e: True)
    compute = clipped(
        spans(
            events,
            lambda e: (
                e.get("cat") == "cpu_op"
                and BACKWARD_FUNCTION.match(str(e.get("name", ""))) is not None
                and (e.get("pid"), e.get("tid")) in threads
            ),
        ),
        bw,
    )
    comm = spans(events, SOURCES[source])
    both = intersection(comm, compute)
    return {
        "backward_ms": total(bw) / 1e3,
        "backward_compute_ms": total(compute) / 1e3,
        "comm_ms": total(comm) / 1e3,
        "comm_in_backward_ms": total(clipped(comm, bw)) / 1e3,
        "overlapped_ms": both / 1e3,
        "overlap_of_backward": both / total(compute) if compute else 0.0,
        "overlap_of_comm": both / total(comm) if comm else 0.0,
    }
