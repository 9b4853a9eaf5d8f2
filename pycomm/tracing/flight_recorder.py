"""The flight recorder: when a StallError is raised, the last trace events of every rank still reachable
are dumped beside it, so a hang report shows each rank's last ops (PyTorch's NCCL flight recorder does
the same).

It works while trace events are recorded and a directory is known: PYCOMM_FLIGHT_RECORDER=DIR (events
recorded from pycomm.init() on, no trace files), PYCOMM_TRACE=DIR, or a running pycomm.profile(DIR).
The directory must be shared by the ranks (it is also how they reach each other, whatever the transport
and even when the communicator is stuck):

1. the rank whose wait timed out puts its last events as ops (name, communicator, seq, facts, the
   phase each reached) in `flight_rank<R>.json` and writes `flight_request_rank<R>.json`;
2. every rank that records runs a watcher thread that looks for new requests every WATCH_S seconds
   and answers each in its own `flight_rank<R>.json` (several ranks may stall at once);
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

LAST_EVENTS = 256  # per thread: the last ~50 ops of each thread
WATCH_S = 0.25
ANSWER_WAIT_S = 3.0
COMBINED = "flight.json"
KEEP_ANSWERS = 8  # answers kept in a rank's dump (several ranks may stall at once)

_state_lock = threading.Lock()
_directory: Optional[Path] = None
_rank, _size = 0, 1
_watcher: Optional[threading.Thread] = None
_answered: set[str] = set()
_answers: dict[str, dict] = {}


def rank_dump(directory: Path, rank: int) -> Path:
    """Rank `rank`'s answers: {"rank", "answers": {request id: snapshot}} (its latest few)."""
    return directory / f"flight_rank{rank}.json"


def request_file(directory: Path, rank: int) -> Path:
    return directory / f"flight_request_rank{rank}.json"


def arm(directory: Any, rank: int, size: int) -> None:
    """Dumps go to `directory` from now on (this process is rank `rank` of `size`); starts the watcher."""
    global _directory, _rank, _size, _watcher
    from pycomm._build import core

    with _state_lock:
        _directory, _rank, _size = Path(directory), rank, size
        _directory.mkdir(parents=True, exist_ok=True)
        for old in _directory.glob("flight_request_rank*.json"):  # an earlier run's requests are not ours
            _answered.add(_read(old).get("id", ""))
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


def snapshot(reason: str, comm_key: str) -> dict:
    """This rank's last ops, from the last LAST_EVENTS events of each thread's ring: every op, the latest,
    and the latest on `comm_key` (the communicator that stalled)."""
    ops, spans = tracing.records(tracing.recent(LAST_EVENTS))
    comms = tracing.comms()
    now = tracing.now_ns()

    def row(op: tracing.Op) -> dict:
        rec = comms.get(op.comm_id)
        out = {
            "name": op.name,
            "comm": rec.key if rec else str(op.comm_id),
            "status": op.status,
            "last_phase": op.last_phase,
            **op.facts(),
        }
        if rec and rec.mesh_dim:
            out["mesh_dim"] = rec.mesh_dim
        out["phases_ms_ago"] = {p: round((now - t) / 1e6, 3) for p, t in op.phases.items()}
        if op.end is not None:
            out["ended_ms_ago"] = round((now - op.end) / 1e6, 3)
        return out

    rows = [row(o) for o in ops]
    on_comm = [r for r in rows if r["comm"] == comm_key]
    return {
        "rank": _rank,
        "world_size": _size,
        "pid": os.getpid(),
        "reason": reason,
        "recording": tracing.ACTIVE,
        "ops": rows,
        "last_op": rows[-1] if rows else None,
        "stalled_comm": comm_key,
        "last_op_on_stalled_comm": on_comm[-1] if on_comm else None,
        "spans": [{"name": s.name, "open": s.end is None, **s.facts()} for s in spans[-16:]],
    }


def _answer(rid: str, doc: dict) -> None:
    """Adds this rank's snapshot for request `rid` to its dump file."""
    d = _directory
    if d is None:
        return
    with _state_lock:
        _answers[rid] = doc
        while len(_answers) > KEEP_ANSWERS:
            _answers.pop(next(iter(_answers)))
        _write(rank_dump(d, _rank), {"rank": _rank, "answers": dict(_answers)})


def _watch() -> None:
    """Answers other ranks' dump requests (a daemon thread, one per process)."""
    while True:
        time.sleep(WATCH_S)
        d = _directory
        if d is None:
            continue
        for path in d.glob("flight_request_rank*.json"):
            request = _read(path)
            rid = request.get("id")
            if not rid or rid in _answered:
                continue
            _answered.add(rid)
            _answer(
                rid,
                snapshot(f"asked by rank {request.get('rank')}: {request.get('reason', '')}", request.get("comm", "")),
            )


def summary_line(rank: int, dump: Optional[dict]) -> str:
    if dump is None:
        return f"rank {rank}: no answer"
    op, last = dump.get("last_op_on_stalled_comm"), dump.get("last_op")
    if not op and not last:
        return f"rank {rank}: no op recorded"
    text = f"rank {rank}: " + (
        f"{op['name']} #{op['seq']} on {op['comm']} ({op['last_phase']})"
        if op
        else f"no op on {dump.get('stalled_comm')}"
    )
    if last and last != op:
        text += f", latest {last['name']} #{last['seq']} on {last['comm']} ({last['last_phase']})"
    return text


def on_stall(message: str, comm_id: int = 0) -> str:
    """Called by the core (and the gloo transport) just before a StallError is raised on communicator
    `comm_id`; returns what to append to its message. Never raises."""
    d = _directory
    if d is None or not tracing.ACTIVE:
        return ""
    try:
        rec = tracing.comms().get(comm_id)
        key = rec.key if rec else ""
        rid = uuid.uuid4().hex
        _answered.add(rid)
        mine = snapshot(message, key)
        _answer(rid, mine)
        _write(
            request_file(d, _rank),
            {"id": rid, "rank": _rank, "comm": key, "reason": message[:500], "time": time.time()},
        )
        dumps: dict[int, Optional[dict]] = {r: None for r in range(_size)}
        dumps[_rank] = mine
        deadline = time.monotonic() + ANSWER_WAIT_S
        while time.monotonic() < deadline and any(v is None for v in dumps.values()):
            for r in dumps:
                if dumps[r] is None:
                    dumps[r] = _read(rank_dump(d, r)).get("answers", {}).get(rid)
            time.sleep(0.05)
        combined = {
            "requested_by": _rank,
            "stalled_comm": key,
            "reason": message,
            "ranks": {str(r): v for r, v in dumps.items()},
            "no_answer": [r for r, v in dumps.items() if v is None],
        }
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
