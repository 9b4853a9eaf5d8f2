"""The flight recorder: when a StallError is raised, the last trace events of every rank still reachable
are dumped beside it, so a hang report shows each rank's last ops (PyTorch's NCCL flight recorder does
the same).

It works while trace events are recorded and a directory is known: PYCOMM_FLIGHT_RECORDER=DIR (events
recorded from pycomm.init() on, no trace files), PYCOMM_TRACE=DIR, or a running pycomm.profile(DIR).
The directory must be shared by the ranks (it is also how they reach each other, whatever the transport
and even when the communicator is stuck):

1. the rank whose wait timed out writes `flight_rank<R>.json` (its last events as ops: name,
   communicator, seq, facts, the phase each reached) and `flight_request.json`;
2. every rank that records runs a watcher thread that looks for a new request every WATCH_S seconds
   and answers with its own `flight_rank<R>.json`;
3. the stalled rank waits up to ANSWER_WAIT_S for the answers, writes `flight.json` (every rank's dump,
   and the ranks that did not answer: dead, or unable to run Python) and its StallError's message
   ends with the path and each rank's last op."""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from pycomm import settings, tracing

LAST_EVENTS = 256        # per thread: the last ~50 ops of each thread
WATCH_S = 0.25
ANSWER_WAIT_S = 3.0
REQUEST = "flight_request.json"
COMBINED = "flight.json"

_state_lock = threading.Lock()
_directory: Optional[Path] = None
_rank, _size = 0, 1
_watcher: Optional[threading.Thread] = None
_answered: set[str] = set()


def rank_dump(directory: Path, rank: int) -> Path:
    return directory / f"flight_rank{rank}.json"


def arm(directory: Any, rank: int, size: int) -> None:
    """Dumps go to `directory` from now on (this process is rank `rank` of `size`); starts the watcher."""
    global _directory, _rank, _size, _watcher
    from pycomm._build import core
    with _state_lock:
        _directory, _rank, _size = Path(directory), rank, size
        _directory.mkdir(parents=True, exist_ok=True)
        request = _directory / REQUEST
        if request.exists():      # an old run's request is not ours to answer
            _answered.add(_read(request).get("id", ""))
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="pycomm-flight-recorder", daemon=True)
            _watcher.start()
    core().set_stall_hook(on_stall)


def disarm() -> None:
    global _directory
    with _state_lock:
        _directory = None


def directory() -> Optional[Path]:
    return _directory


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def snapshot(reason: str, request_id: str) -> dict:
    """This rank's last ops, from the last LAST_EVENTS events of each thread's ring."""
    ops, spans = tracing.records(tracing.recent(LAST_EVENTS))
    comms = tracing.comms()
    now = tracing.now_ns()

    def row(op: tracing.Op) -> dict:
        rec = comms.get(op.comm_id)
        out = {"name": op.name, "comm": rec.key if rec else op.comm_id, "status": op.status,
               "last_phase": op.last_phase, **op.facts()}
        if rec and rec.mesh_dim:
            out["mesh_dim"] = rec.mesh_dim
        out["phases_ms_ago"] = {p: round((now - t) / 1e6, 3) for p, t in op.phases.items()}
        if op.end is not None:
            out["ended_ms_ago"] = round((now - op.end) / 1e6, 3)
        return out

    return {"rank": _rank, "world_size": _size, "pid": os.getpid(), "request": request_id, "reason": reason,
            "recording": tracing.ACTIVE, "ops": [row(o) for o in ops],
            "last_op": row(ops[-1]) if ops else None,
            "spans": [{"name": s.name, "open": s.end is None, **s.facts()} for s in spans[-16:]]}


def _watch() -> None:
    """Answers other ranks' dump requests (a daemon thread, one per process)."""
    while True:
        time.sleep(WATCH_S)
        d = _directory
        if d is None:
            continue
        request = _read(d / REQUEST)
        rid = request.get("id")
        if not rid or rid in _answered:
            continue
        _answered.add(rid)
        if request.get("rank") != _rank:
            _write(rank_dump(d, _rank), snapshot(f"asked by rank {request.get('rank')}: {request.get('reason', '')}", rid))


def summary_line(rank: int, dump: Optional[dict]) -> str:
    if dump is None:
        return f"rank {rank}: no answer"
    op = dump.get("last_op")
    if not op:
        return f"rank {rank}: no op recorded"
    return f"rank {rank}: {op['name']} #{op['seq']} on {op['comm']} ({op['last_phase']})"


def on_stall(message: str) -> str:
    """Called by the core (and the gloo transport) just before a StallError is raised; returns what to
    append to its message. Never raises."""
    d = _directory
    if d is None or not tracing.ACTIVE:
        return ""
    try:
        rid = uuid.uuid4().hex
        _answered.add(rid)
        mine = snapshot(message, rid)
        _write(rank_dump(d, _rank), mine)
        _write(d / REQUEST, {"id": rid, "rank": _rank, "reason": message[:500], "time": time.time()})
        dumps: dict[int, Optional[dict]] = {r: None for r in range(_size)}
        dumps[_rank] = mine
        deadline = time.monotonic() + ANSWER_WAIT_S
        while time.monotonic() < deadline and any(v is None for v in dumps.values()):
            for r in dumps:
                if dumps[r] is None:
                    got = _read(rank_dump(d, r))
                    if got.get("request") == rid:
                        dumps[r] = got
            time.sleep(0.05)
        combined = {"requested_by": _rank, "reason": message, "ranks": {str(r): v for r, v in dumps.items()},
                    "no_answer": [r for r, v in dumps.items() if v is None]}
        _write(d / COMBINED, combined)
        lines = "; ".join(summary_line(r, v) for r, v in sorted(dumps.items()))
        return f" Flight recorder: {d / COMBINED} (last ops: {lines})."
    except Exception as e:  # a diagnostic must never replace the error it reports
        return f" (flight recorder failed: {e})"


def start_from_environment(rank: int, size: int) -> None:
    """PYCOMM_FLIGHT_RECORDER or PYCOMM_TRACE names the directory."""
    d = settings.get("PYCOMM_FLIGHT_RECORDER") or settings.get("PYCOMM_TRACE")
    if d is not None:
        arm(d, rank, size)
