"""pycomm's trace records (pycomm/tracing/__init__.py) as chrome-trace events ("Trace Event Format": Perfetto,
chrome://tracing, TensorBoard, Holistic Trace Analysis read it).

One process row per rank; one thread row per communicator, named by its key ("world", "world.dup()");
an op is a slice named by the op with its facts in `args` and its phases as slices nested in it
(category "pycomm.phase"). Ops of one communicator that overlap in time (async ops in flight together)
get more rows of that communicator ("world (2)", ...), since a row's slices must nest. Spans recorded
from Python (a coalesced op, its buckets, a quantized pipeline's steps) go to rows of their own
("world: coalesced / quantized"). Times are microseconds of the clock `to_us` maps to."""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

from pycomm.tracing import CommRecord, Op, Span

OP_CATEGORY = "pycomm"
PHASE_CATEGORY = "pycomm.phase"
SPAN_CATEGORY = "pycomm.span"
ROWS_PER_COMM = 64  # thread ids: TID_BASE + comm index * ROWS_PER_COMM + row
SPAN_ROW0 = 32  # the spans' rows of a communicator start here
TID_BASE = 1 << 20  # clear of OS thread ids a torch trace uses on the same process row
POINT_TO_POINT = {"send": "send", "send_tensor": "send", "recv": "recv", "recv_tensor": "recv"}


def _lanes(items: Sequence[tuple[int, int]]) -> list[int]:
    """A row for each (start, end), so that the slices of a row nest or are disjoint; items sorted by
    (start, -end)."""
    stacks: list[list[int]] = []  # per row: ends of the slices still open there
    out = []
    for start, end in items:
        for row, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                out.append(row)
                break
        else:
            stacks.append([end])
            out.append(len(stacks) - 1)
    return out


def _metadata(pid: int, tid: int, name: str, sort: int) -> list[dict]:
    return [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort}},
    ]


def process_metadata(pid: int, name: str, sort: int) -> list[dict]:
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}},
    ]


def events(
    ops: Iterable[Op],
    spans: Iterable[Span],
    comms: dict[int, CommRecord],
    pid: int,
    to_us: Callable[[int], float],
    open_end: int,
) -> list[dict]:
    """Chrome events of one rank's ops and spans on process row `pid`. `open_end`: where ops still in
    flight (and spans never ended) are drawn to end (the trace's last moment)."""
    out: list[dict] = []
    by_comm: dict[int, tuple[list[Op], list[Span]]] = {}
    for op in ops:
        by_comm.setdefault(op.comm_id, ([], []))[0].append(op)
    for sp in spans:
        by_comm.setdefault(sp.comm_id, ([], []))[1].append(sp)
    for index, comm_id in enumerate(sorted(by_comm)):
        rec = comms.get(comm_id) or CommRecord(comm_id, f"communicator {comm_id}", "?", -1, -1)
        base = TID_BASE + index * ROWS_PER_COMM
        comm_args = {"comm": rec.key, "backend": rec.backend}
        if rec.mesh_dim:
            comm_args["mesh_dim"] = rec.mesh_dim
        comm_ops, comm_spans = by_comm[comm_id]
        comm_ops.sort(key=lambda o: (o.start, -(o.end or open_end)))
        rows = _lanes([(o.start, o.end or open_end) for o in comm_ops])
        for op, row in zip(comm_ops, rows):
            tid = base + min(row, SPAN_ROW0 - 1)
            end = op.end if op.end is not None else open_end
            args = {**op.facts(), **comm_args, "status": op.status}
            out.append(
                {
                    "ph": "X",
                    "cat": OP_CATEGORY,
                    "name": op.name,
                    "pid": pid,
                    "tid": tid,
                    "ts": to_us(op.start),
                    "dur": max(0.0, to_us(end) - to_us(op.start)),
                    "args": args,
                }
            )
            for phase, t0, t1 in op.phase_spans():
                out.append(
                    {
                        "ph": "X",
                        "cat": PHASE_CATEGORY,
                        "name": phase,
                        "pid": pid,
                        "tid": tid,
                        "ts": to_us(t0),
                        "dur": max(0.0, to_us(t1) - to_us(t0)),
                        "args": {"op": op.name, "seq": op.seq},
                    }
                )
            if op.end is None:
                last = op.last_phase
                t0 = op.phases[last] if last in op.phases else op.start
                out.append(
                    {
                        "ph": "X",
                        "cat": PHASE_CATEGORY,
                        "name": last,
                        "pid": pid,
                        "tid": tid,
                        "ts": to_us(t0),
                        "dur": max(0.0, to_us(open_end) - to_us(t0)),
                        "args": {"op": op.name, "seq": op.seq},
                    }
                )
        comm_spans.sort(key=lambda s: (s.start, -(s.end or open_end)))
        span_rows = _lanes([(s.start, s.end or open_end) for s in comm_spans])
        for sp, row in zip(comm_spans, span_rows):
            tid = base + SPAN_ROW0 + min(row, ROWS_PER_COMM - SPAN_ROW0 - 1)
            end = sp.end if sp.end is not None else open_end
            out.append(
                {
                    "ph": "X",
                    "cat": SPAN_CATEGORY,
                    "name": sp.name,
                    "pid": pid,
                    "tid": tid,
                    "ts": to_us(sp.start),
                    "dur": max(0.0, to_us(end) - to_us(sp.start)),
                    "args": {**sp.facts(), **comm_args},
                }
            )
        used = sorted({e["tid"] for e in out if e.get("tid", -1) >= base and e["tid"] < base + ROWS_PER_COMM})
        for tid in used:
            row = tid - base
            name = (
                rec.key
                if row == 0
                else (
                    f"{rec.key} ({row + 1})"
                    if row < SPAN_ROW0
                    else f"{rec.key}: compound ops" + (f" ({row - SPAN_ROW0 + 1})" if row > SPAN_ROW0 else "")
                )
            )
            out += _metadata(pid, tid, name, tid)
    return out


def is_op(event: dict) -> bool:
    return event.get("ph") == "X" and event.get("cat") == OP_CATEGORY


def flows(trace_events: Sequence[dict]) -> list[dict]:
    """Flow arrows from each send to the receive that took its message, matched per (communicator,
    sender, receiver, tag) in submission order (MPI's and gloo's non-overtaking order). Needs every rank's
    events with times on one clock (a merged trace); unmatched ends are left out."""
    sends: dict[tuple, list[dict]] = {}
    recvs: dict[tuple, list[dict]] = {}
    for e in trace_events:
        kind = POINT_TO_POINT.get(e.get("name", "")) if is_op(e) else None
        if kind is None or e["args"].get("status") != "done":
            continue
        a = e["args"]
        src, dst = (a["rank"], a.get("peer", -1)) if kind == "send" else (a.get("peer", -1), a["rank"])
        (sends if kind == "send" else recvs).setdefault((a["comm"], src, dst, a.get("tag", -1)), []).append(e)
    out = []
    for key, sent in sends.items():
        got = recvs.get(key, [])
        sent.sort(key=lambda e: e["args"]["seq"])
        got.sort(key=lambda e: e["args"]["seq"])
        for s, r in zip(sent, got):
            fid = len(out) // 2 + 1
            out.append(
                {
                    "ph": "s",
                    "id": fid,
                    "cat": "pycomm.p2p",
                    "name": "message",
                    "pid": s["pid"],
                    "tid": s["tid"],
                    "ts": s["ts"],
                }
            )
            out.append(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": fid,
                    "cat": "pycomm.p2p",
                    "name": "message",
                    "pid": r["pid"],
                    "tid": r["tid"],
                    "ts": r["ts"] + r["dur"],
                }
            )
    return out


def trace_document(
    trace_events: list[dict], rank: Optional[int], world_size: int, backend: str, pycomm_meta: dict
) -> dict:
    """The JSON document of a trace: distributedInfo first (Holistic Trace Analysis finds a file's rank by
    the first `"rank": N` in it), then pycomm's metadata and the events."""
    doc: dict = {}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": world_size, "backend": backend}
    doc["displayTimeUnit"] = "ms"
    doc["pycomm"] = pycomm_meta
    doc["traceEvents"] = trace_events
    return doc
