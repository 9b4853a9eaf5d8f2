"""Trace events: switching the core's recorder on and off, reading its per-thread rings, and recording
from Python (compound ops' spans, the gloo transport's ops) into the same rings.

The compiled core records each op's facts and the start of each of its phases (csrc/diagnostics/trace.h):
queued -> op_check -> wait_peers -> wire -> done (or failed). A phase ends where the next begins; an op
whose first poll of its op check already finishes it has no wait_peers. `ops()` turns events into `Op`
records; spans (a coalesced op, its buckets, a quantized pipeline segment's steps) into `Span` records.

`pycomm.profile()` (profiling.py) is the user's entry; this module is its engine, and the package's other
files read what it records: chrome.py (records as chrome-trace events), merge.py (every rank's trace on
rank 0's clock), analysis.py (overlap and top ops of a merged trace), flight_recorder.py (the last events
of every rank, dumped when an op stalls). None of them is imported here: they import this engine."""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from pycomm import _dtypes, settings
from pycomm._build import core
from pycomm.ops import ReduceOp

OP_PHASES = ("queued", "op_check", "wait_peers", "wire")  # in order; "done" / "failed" end an op
ENDS = ("done", "failed")


@functools.cache
def phases() -> dict[str, int]:
    """The core's TracePhase codes by name (read when first needed: `import pycomm` needs no core)."""
    return dict(core().trace_phases)


@functools.cache
def phase_names() -> dict[int, str]:
    return {v: k for k, v in phases().items()}


@functools.cache
def event_dtype() -> np.dtype:
    """The core's TraceEvent as a numpy dtype (field offsets from _C.trace_layout)."""
    layout = core().trace_layout()
    return np.dtype(
        {
            "names": list(layout),
            "formats": [f for _, f in layout.values()],
            "offsets": [o for o, _ in layout.values()],
            "itemsize": core().trace_event_size,
        }
    )


DTYPE_NAMES = {code: str(d).replace("torch.", "") for d, code in _dtypes.CODES.items()}
COLLECTIVE, ON_CALLER = 1, 2

# True while recording: Python hooks (fusion, quantized, gloo) test this module global alone.
ACTIVE = False


def enable(events_per_thread: Optional[int] = None) -> None:
    """Starts recording into rings of PYCOMM_TRACE_EVENTS (or `events_per_thread`) events per thread."""
    global ACTIVE
    n = settings.get("PYCOMM_TRACE_EVENTS") if events_per_thread is None else events_per_thread
    core().trace_enable(int(n))
    ACTIVE = True


def disable() -> None:
    global ACTIVE
    ACTIVE = False
    core().trace_disable()


def now_ns() -> int:
    """The trace clock (CLOCK_MONOTONIC ns), as the core stamps its events."""
    return core().trace_now_ns()


# ---- communicators --------------------------------------------------------------------------------
@dataclass
class CommRecord:
    """What a trace says about a communicator: `key` names it alike on every rank (the same ranks made it
    the same way), `mesh_dim` is the pycomm.Mesh dimension it serves ("" when none)."""

    comm_id: int
    key: str
    backend: str
    rank: int
    size: int
    mesh_dim: str = ""


_COMMS: dict[int, CommRecord] = {}
_LIVE: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_KEYS: dict[str, int] = {}
_LOCK = threading.Lock()


def register(comm: Any) -> None:
    """Called by every Communicator: its transport's trace id, and a name every rank gives it alike."""
    comm_id = getattr(comm._t, "trace_comm_id", 0)
    if not comm_id:
        return
    with _LOCK:
        _LIVE[comm_id] = comm
        n = _KEYS.get(comm.name, 0)
        _KEYS[comm.name] = n + 1
        key = comm.name if n == 0 else f"{comm.name}~{n}"
        _COMMS[comm_id] = CommRecord(comm_id, key, comm.backend, comm.rank, comm.size, comm.mesh_dim)


def comms() -> dict[int, CommRecord]:
    """Every communicator this process made, with the names and mesh dimensions they have now."""
    with _LOCK:
        for comm_id, comm in list(_LIVE.items()):
            rec = _COMMS[comm_id]
            rec.mesh_dim = comm.mesh_dim
            if not rec.key.startswith(comm.name):  # renamed after creation (split_by_node's intra/inter)
                rec.key = comm.name
        return {k: CommRecord(**vars(v)) for k, v in _COMMS.items()}


# ---- recording from Python --------------------------------------------------------------------------
_SPAN_IDS = itertools.count(1)


def record_phase(
    name: str,
    comm_id: int,
    rank: int,
    size: int,
    seq: int,
    phase: str,
    *,
    count: int = 0,
    dtype: int = -1,
    nbytes: int = 0,
    wire_bytes: Optional[int] = None,
    redop: int = -1,
    algorithm: str = "",
    peer: int = -1,
    tag: int = -1,
    bucket: int = -1,
    collective: bool = True,
    ts_ns: Optional[int] = None,
) -> None:
    """One phase of an op run by a transport written in Python (gloo), in the core's shape."""
    core().trace_record(
        name,
        comm_id,
        rank,
        size,
        seq,
        phases()[phase],
        now_ns() if ts_ns is None else ts_ns,
        count=count,
        dtype=dtype,
        bytes=nbytes,
        wire_bytes=nbytes if wire_bytes is None else wire_bytes,
        redop=redop,
        algorithm=algorithm,
        peer=peer,
        tag=tag,
        bucket=bucket,
        collective=collective,
    )


class SpanHandle:
    """An open span (begun by `span()`); end() records its end, once, on whatever thread calls it."""

    __slots__ = ("_args", "_open")

    def __init__(self, args: dict) -> None:
        self._args, self._open = args, True
        core().trace_record(phase=phases()["span_begin"], ts_ns=now_ns(), **args)

    def end(self) -> None:
        if self._open and ACTIVE:
            self._open = False
            core().trace_record(phase=phases()["span_end"], ts_ns=now_ns(), **self._args)


def span(
    name: str,
    comm: Any,
    *,
    count: int = 0,
    dtype: Any = None,
    nbytes: int = 0,
    wire_bytes: int = 0,
    op: Any = None,
    bucket: int = -1,
    segment: int = -1,
    algorithm: str = "",
) -> Optional[SpanHandle]:
    """A range of a compound op on `comm` (None while not recording): a coalesced op, one of its buckets,
    one step of a quantized pipeline segment. `dtype`: a torch dtype; `op`: a pycomm.ReduceOp."""
    if not ACTIVE:
        return None
    t = comm._t
    code = -1 if dtype is None else _dtypes.CODES.get(dtype, -1)
    return SpanHandle(
        dict(
            name=name,
            comm_id=getattr(t, "trace_comm_id", 0),
            rank=comm.rank,
            size=comm.size,
            seq=0,
            count=count,
            dtype=code,
            bytes=nbytes,
            wire_bytes=wire_bytes,
            redop=-1 if op is None else int(op),
            algorithm=algorithm,
            bucket=bucket,
            segment=segment,
            span_id=next(_SPAN_IDS),
        )
    )


def end(handle: Optional[SpanHandle]) -> None:
    if handle is not None:
        handle.end()


# ---- reading ----------------------------------------------------------------------------------------
@dataclass
class Events:
    """Raw events (event_dtype() rows, each with the OS thread that recorded it) and how many were lost."""

    rows: np.ndarray
    threads: np.ndarray
    dropped: int = 0

    @staticmethod
    def from_rings(rings: Iterable[tuple[int, bytes]], dropped: int = 0) -> "Events":
        parts, tids = [], []
        for tid, raw in rings:
            rows = np.frombuffer(raw, event_dtype())
            parts.append(rows)
            tids.append(np.full(len(rows), tid, dtype=np.int64))
        if not parts:
            return Events(np.empty(0, event_dtype()), np.empty(0, np.int64), dropped)
        rows, threads = np.concatenate(parts), np.concatenate(tids)
        order = np.argsort(rows["ts_ns"], kind="stable")
        return Events(rows[order], threads[order], dropped)


def drain() -> Events:
    """Every event recorded since the previous drain (or clear)."""
    rings, dropped = core().trace_drain()
    return Events.from_rings(rings, dropped)


def recent(per_thread: int) -> Events:
    """The last `per_thread` events of each thread's ring, left in place (the flight recorder)."""
    return Events.from_rings(core().trace_recent(per_thread))


def clear() -> None:
    core().trace_clear()


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


@dataclass
class _RowFacts:
    """The facts every event of an op or of a span carries (see _row_facts)."""

    name: str
    comm_id: int
    rank: int
    size: int
    count: int
    dtype: str
    nbytes: int
    wire_bytes: int
    redop: str
    algorithm: str
    bucket: int


def _set_facts(out: dict, facts: tuple[tuple[str, Any, Any], ...]) -> dict:
    """`out` with each (key, value, unset) of `facts` whose value is set: a trace's args leave the unset out."""
    for key, value, unset in facts:
        if value != unset:
            out[key] = value
    return out


@dataclass
class Op(_RowFacts):
    """One op of one communicator: its facts and when each phase began (trace clock, ns)."""

    seq: int
    peer: int
    tag: int
    collective_index: int
    collective: bool
    phases: dict[str, int] = field(default_factory=dict)  # phase -> start ns, in OP_PHASES order
    end: Optional[int] = None  # done/failed ns; None: still in flight
    status: str = "in flight"  # "done", "failed" or "in flight"
    on_caller: bool = False
    threads: set[int] = field(default_factory=set)

    @property
    def start(self) -> int:
        return min(self.phases.values()) if self.phases else (self.end or 0)

    @property
    def last_phase(self) -> str:
        if self.end is not None:
            return self.status
        return max(self.phases, key=lambda p: self.phases[p]) if self.phases else "unknown"

    def phase_spans(self) -> Iterator[tuple[str, int, int]]:
        """(phase, start, end) for each phase that began, ending where the next one begins."""
        order = sorted(self.phases.items(), key=lambda kv: (kv[1], OP_PHASES.index(kv[0])))
        for i, (name, t0) in enumerate(order):
            t1 = order[i + 1][1] if i + 1 < len(order) else self.end
            if t1 is not None:
                yield name, t0, t1

    def facts(self) -> dict:
        """The op's facts as a trace's args show them."""
        out = {
            "comm_id": self.comm_id,
            "rank": self.rank,
            "size": self.size,
            "seq": self.seq,
            "count": self.count,
            "dtype": self.dtype,
            "bytes": self.nbytes,
            "wire_bytes": self.wire_bytes,
        }
        _set_facts(
            out,
            (
                ("op", self.redop, ""),
                ("algorithm", self.algorithm, ""),
                ("peer", self.peer, -1),
                ("tag", self.tag, -1),
                ("bucket", self.bucket, -1),
                ("collective_index", self.collective_index, -1),
            ),
        )
        if self.on_caller:
            out["on_caller_thread"] = True
        return out


@dataclass
class Span(_RowFacts):
    """A range recorded from Python (see span())."""

    span_id: int
    segment: int
    start: int
    end: Optional[int] = None

    def facts(self) -> dict:
        out = {"comm_id": self.comm_id, "count": self.count, "bytes": self.nbytes, "wire_bytes": self.wire_bytes}
        return _set_facts(
            out,
            (
                ("dtype", self.dtype, ""),
                ("op", self.redop, ""),
                ("algorithm", self.algorithm, ""),
                ("bucket", self.bucket, -1),
                ("segment", self.segment, -1),
            ),
        )


def _redop(code: int) -> str:
    return ReduceOp(code).name if code >= 0 else ""


def _row_facts(e: Any) -> dict[str, Any]:
    """The _RowFacts of a trace row, as keywords."""
    return dict(
        name=_text(e["name"]),
        comm_id=int(e["comm_id"]),
        rank=int(e["rank"]),
        size=int(e["comm_size"]),
        count=int(e["count"]),
        dtype=DTYPE_NAMES.get(int(e["dtype"]), ""),
        nbytes=int(e["bytes"]),
        wire_bytes=int(e["wire_bytes"]),
        redop=_redop(int(e["redop"])),
        algorithm=_text(e["algorithm"]),
        bucket=int(e["bucket"]),
    )


def records(events: Events) -> tuple[list[Op], list[Span]]:
    """The ops and spans in `events` (ops in start order). An op whose first events were overwritten
    keeps the phases that remain."""
    ops: dict[tuple[int, int], Op] = {}
    spans: dict[int, Span] = {}
    for e, tid in zip(events.rows, events.threads):
        phase = phase_names()[int(e["phase"])]
        if e["span_id"]:
            sid = int(e["span_id"])
            if phase == "span_begin":
                spans[sid] = Span(**_row_facts(e), span_id=sid, segment=int(e["segment"]), start=int(e["ts_ns"]))
            elif sid in spans:
                spans[sid].end = int(e["ts_ns"])
            continue
        key = (int(e["comm_id"]), int(e["seq"]))
        op = ops.get(key)
        if op is None:
            op = ops[key] = Op(
                **_row_facts(e),
                seq=key[1],
                peer=int(e["peer"]),
                tag=int(e["tag"]),
                collective_index=int(e["collective_index"]),
                collective=bool(e["flags"] & COLLECTIVE),
            )
        op.threads.add(int(tid))
        op.on_caller = op.on_caller or bool(e["flags"] & ON_CALLER)
        if phase in ENDS:
            op.end, op.status = int(e["ts_ns"]), phase
            if op.peer < 0 <= int(e["peer"]):
                op.peer = int(e["peer"])  # a receive from any source: the rank it came from
        else:
            op.phases.setdefault(phase, int(e["ts_ns"]))
    return sorted(ops.values(), key=lambda o: o.start), sorted(spans.values(), key=lambda s: s.start)
