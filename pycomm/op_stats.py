"""Per-op counters of the transports written in Python (gloo), in the shape of the compiled core's
(csrc/diagnostics/stats.h): pycomm.stats() adds them to the core's, so a user sees one table whatever
transport ran the op."""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
_COUNTERS: dict[str, dict[str, float]] = {}


def bus_factor(op: str, size: int) -> float:
    """busbw = bytes * bus_factor / seconds: the core's op table (pycomm._C.op_table(), defined once in
    csrc/common/op_table.cc); ValueError naming the known ops for another name."""
    from pycomm._build import core  # the core is built before any transport counts an op

    return float(core().bus_factor(op, size))


def record(op: str, nbytes: int, bus_bytes: float, seconds: float) -> None:
    with _LOCK:
        c = _COUNTERS.setdefault(op, {"calls": 0, "bytes": 0, "bus_bytes": 0.0, "seconds": 0.0, "inline_calls": 0})
        c["calls"] += 1
        c["bytes"] += nbytes
        c["bus_bytes"] += bus_bytes
        c["seconds"] += seconds


def merged(core_counters: dict[str, dict[str, float]], reset: bool = False) -> dict[str, dict[str, float]]:
    """The core's counters plus these, op by op (same keys: calls, bytes, bus_bytes, seconds, inline_calls)."""
    with _LOCK:
        out = {op: dict(c) for op, c in core_counters.items()}
        for op, c in _COUNTERS.items():
            into = out.setdefault(op, {k: 0 for k in c})
            for k, v in c.items():
                into[k] = into.get(k, 0) + v
        if reset:
            _COUNTERS.clear()
    return out
