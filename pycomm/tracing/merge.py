"""One trace of every rank: clock offsets from a ping exchange, and the per-rank traces merged onto rank
0's clock with flow arrows from sends to their receives.

Clocks: rank 0 pings each rank a few times at the start and at the end of a profile (`ping`); rank r
answers with its clock. A sample (t0, tr, t1) says rank r's clock read tr while rank 0's was about
(t0 + t1) / 2; the sample with the shortest round trip is kept (NTP's rule), at the start and at the
end, and rank r's times are mapped to rank 0's by the offset interpolated between the two (drift)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from pycomm import tracing
from pycomm.tracing import chrome as trace_chrome

PING_ROUNDS = 8
Sample = tuple[int, int, int]  # (rank 0 before, rank r, rank 0 after), trace clock ns


def _ping_tag(comm: Any) -> int:
    return min(comm.max_tag, 32767) - 1  # any tag works: the pings run alone, while nothing is traced


def ping(comm: Any, rounds: int = PING_ROUNDS) -> dict[int, list[Sample]]:
    """Collective over `comm`: on rank 0, {rank: samples} for every other rank; {} elsewhere."""
    if comm.size == 1:
        return {}
    device = torch.device("cuda", torch.cuda.current_device()) if comm.backend == "nccl" else torch.device("cpu")
    buf = torch.zeros(1, dtype=torch.int64, device=device)
    tag = _ping_tag(comm)
    out: dict[int, list[Sample]] = {}
    for r in range(1, comm.size):
        if comm.rank == 0:
            samples = []
            for _ in range(rounds):
                t0 = tracing.now_ns()
                comm.send(buf, r, tag)
                comm.recv(buf, r, tag)
                t1 = tracing.now_ns()
                samples.append((t0, int(buf.item()), t1))
            out[r] = samples
        elif comm.rank == r:
            for _ in range(rounds):
                comm.recv(buf, 0, tag)
                buf.fill_(tracing.now_ns())
                comm.send(buf, 0, tag)
    return out


def best_offset(samples: Sequence[Sample]) -> tuple[float, float]:
    """(offset, at): rank r's clock minus rank 0's (ns) from the sample with the shortest round trip,
    and the time on rank r's clock it was measured."""
    t0, tr, t1 = min(samples, key=lambda s: s[2] - s[0])
    return tr - (t0 + t1) / 2, float(tr)


class ClockMap:
    """Rank r's trace clock (ns) -> rank 0's, from the start and end pings."""

    def __init__(self, start: Optional[Sequence[Sample]], end: Optional[Sequence[Sample]]) -> None:
        self.points = [best_offset(s) for s in (start, end) if s]

    def offset(self, t: float) -> float:
        if not self.points:
            return 0.0
        if len(self.points) == 1 or self.points[1][1] == self.points[0][1]:
            return self.points[0][0]
        (o0, a0), (o1, a1) = self.points
        return o0 + (o1 - o0) * (t - a0) / (a1 - a0)

    def __call__(self, t: float) -> float:
        return t - self.offset(t)


def merge(rank_files: Sequence[Path], out: Path, clock: dict, warn: Callable[[str], None]) -> dict:
    """Writes `out`: every rank's events (process row = rank) on rank 0's clock, plus send -> receive
    flows. `clock`: rank 0's ping table {"start": {rank: samples}, "end": {...}}. Returns a summary."""
    merged: list[dict] = []
    missing = []
    for r, path in enumerate(rank_files):
        if not path.exists():
            missing.append(r)
            continue
        doc = json.loads(path.read_text())
        meta = doc.get("pycomm", {})
        to_mono = float(meta.get("file_us_minus_trace_us", 0.0))  # a torch trace's time base differs
        cmap = ClockMap(clock.get("start", {}).get(str(r)), clock.get("end", {}).get(str(r)))
        pids: dict[Any, int] = {}
        for e in doc["traceEvents"]:
            e = dict(e)
            if "pid" in e:
                # each process of the rank's file (torch may show a few) becomes one row per rank; rank r's
                # first is r, so that the merged rows sort and read by rank
                e["pid"] = pids.setdefault(e["pid"], r if not pids else 10_000 * (len(pids) + 1) + r)
            if "ts" in e and e.get("ph") != "M":
                mono_ns = (float(e["ts"]) - to_mono) * 1e3
                e["ts"] = cmap(mono_ns) / 1e3
            merged.append(e)
        for pid in pids.values():
            merged = [
                e
                for e in merged
                if not (
                    e.get("ph") == "M"
                    and e.get("pid") == pid
                    and e.get("name") in ("process_name", "process_sort_index")
                )
            ]
            merged += trace_chrome.process_metadata(pid, f"rank {r}" + ("" if pid == r else f" ({pid // 10_000})"), pid)
    arrows = trace_chrome.flows(merged)
    merged += arrows
    if missing:
        warn(
            f"pycomm.profile: no trace of rank(s) {missing} in {rank_files[0].parent} (the directory must be "
            f"shared by every rank); the merged trace leaves them out"
        )
    summary = {"ranks": len(rank_files) - len(missing), "missing_ranks": missing, "flows": len(arrows) // 2}
    doc = trace_chrome.trace_document(merged, None, len(rank_files), "", {"merged": summary, "clock": clock})
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, out)
    return summary
