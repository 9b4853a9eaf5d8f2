"""`pycomm.profile()`: a communication timeline of every rank, alone or joined with torch.profiler's.

    with pycomm.profile("runs/trace"):             # collective over pycomm.world()
        train()
    # runs/trace/ranks/rank<R>.json   one chrome trace per rank (torch's events too, with torch=True)
    # runs/trace/trace.json           rank 0: every rank on rank 0's clock, sends -> receives as arrows

    with pycomm.profile("runs/trace", torch=True) as p:   # torch.profiler runs inside: one timeline
        for step in ...:
            ...; p.step()

`PYCOMM_TRACE=DIR` does the same around a whole unmodified program: from pycomm.init() to
pycomm.finalize() (or exit). See docs/tracing.md for what the traces hold."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Optional, Union

from pycomm import settings, tracing
from pycomm.tracing import chrome as trace_chrome
from pycomm.tracing import flight_recorder
from pycomm.tracing import merge as trace_merge

RANKS_DIR = "ranks"
MERGED = "trace.json"
CLOCK_MARKER = "pycomm::clock"


def rank_file(directory: Union[str, Path], rank: int) -> Path:
    return Path(directory) / RANKS_DIR / f"rank{rank}.json"


class Profile:
    """An active `pycomm.profile()`: `torch_profiler` (with torch=...) and `step()` for its schedule;
    after the block, `rank_path`, `merged_path` (rank 0) and `summary` (what the merge found)."""

    def __init__(self, directory: Union[str, Path], comm: Any, torch: Union[bool, dict], events: Optional[int]) -> None:
        self.directory = Path(directory)
        self.comm = comm
        self.torch_options = {} if torch is True else (dict(torch) if torch else None)
        self.events = events
        self.torch_profiler: Any = None
        self.rank_path = rank_file(self.directory, comm.rank)
        self.merged_path: Optional[Path] = self.directory / MERGED if comm.rank == 0 else None
        self.summary: dict = {}
        self._clock: dict = {}
        self._marker_ns = 0
        self._started = False
        self._armed = False

    # ---- the block ----------------------------------------------------------------------------------
    def start(self) -> "Profile":
        global _RUNNING
        if _RUNNING is not None:
            why = (
                f"PYCOMM_TRACE={_PROGRAM.directory} traces the whole program (unset it to profile a part)"
                if _RUNNING is _PROGRAM
                else "a profile is already running in this process (they do not nest)"
            )
            raise RuntimeError(f"pycomm.profile({str(self.directory)!r}): {why}")
        _RUNNING = self
        self._was_recording = tracing.ACTIVE  # PYCOMM_FLIGHT_RECORDER keeps recording after the block
        self.rank_path.parent.mkdir(parents=True, exist_ok=True)
        self._clock["start"] = trace_merge.ping(self.comm)
        if self.torch_options is not None:
            import torch.profiler as tp

            # recording all along (the block is the window), with ProfilerStep#N markers at each step()
            options = {
                "activities": _activities(tp),
                "record_shapes": False,
                "schedule": lambda step: tp.ProfilerAction.RECORD,
                **self.torch_options,
            }
            self.torch_profiler = tp.profile(**options)
            self.torch_profiler.__enter__()
            with tp.record_function(CLOCK_MARKER):  # where the trace clock sits in torch's time base
                self._marker_ns = tracing.now_ns()
        tracing.clear()
        tracing.enable(self.events)
        self._armed = flight_recorder.directory() is None  # a StallError inside dumps here
        if self._armed:
            flight_recorder.arm(self.directory, self.comm.rank, self.comm.size)
        self._started = True
        return self

    def step(self) -> None:
        """Advances the torch profiler's schedule (torch.profiler.profile.step), if one runs."""
        if self.torch_profiler is not None:
            self.torch_profiler.step()

    def stop(self, collective: bool = True) -> None:
        """Writes this rank's trace, then (`collective`) aligns clocks and merges on rank 0. A block left
        by an exception writes this rank's file alone: the other ranks may not be there to answer."""
        if not self._started:
            return
        global _RUNNING
        _RUNNING = None
        self._started = False
        if self._armed:
            flight_recorder.disarm()
        end_ns = tracing.now_ns()
        if not self._was_recording:
            tracing.disable()
        events = tracing.drain()
        torch_doc = self._stop_torch()
        ops, spans = tracing.records(events)
        comms = tracing.comms()
        if torch_doc is not None:
            marker_us = _marker_us(torch_doc)
            shift_us = marker_us - self._marker_ns / 1e3 if marker_us is not None else 0.0
            pid = os.getpid()
            rows = torch_doc["traceEvents"]
        else:
            shift_us, pid, rows = 0.0, self.comm.rank, []
            rows += trace_chrome.process_metadata(pid, f"rank {self.comm.rank}", self.comm.rank)
        rows += trace_chrome.events(ops, spans, comms, pid, lambda ns: ns / 1e3 + shift_us, end_ns)
        meta = {
            "rank": self.comm.rank,
            "world_size": self.comm.size,
            "dropped_events": events.dropped,
            "ops": len(ops),
            "spans": len(spans),
            "file_us_minus_trace_us": shift_us,
            "comms": {str(k): vars(v) for k, v in comms.items()},
        }
        doc = trace_chrome.trace_document(rows, self.comm.rank, self.comm.size, f"pycomm-{self.comm.backend}", meta)
        if torch_doc is not None:  # torch's own top-level keys (baseTimeNanoseconds, deviceProperties, ...)
            doc = {**{k: v for k, v in torch_doc.items() if k != "traceEvents"}, **doc}
        _write_json(self.rank_path, doc)
        if events.dropped:
            warnings.warn(
                f"pycomm.profile: {events.dropped} trace events of rank {self.comm.rank} were overwritten "
                f"before they could be read (raise PYCOMM_TRACE_EVENTS, now "
                f"{settings.get('PYCOMM_TRACE_EVENTS')} per thread)",
                RuntimeWarning,
                stacklevel=3,
            )
        if not collective:
            return
        self._clock["end"] = trace_merge.ping(self.comm)
        self.comm.barrier()  # every rank's file is written
        if self.merged_path is not None:
            table = {when: {str(r): s for r, s in samples.items()} for when, samples in self._clock.items()}
            files = [rank_file(self.directory, r) for r in range(self.comm.size)]
            self.summary = trace_merge.merge(
                files, self.merged_path, table, lambda m: warnings.warn(m, RuntimeWarning, stacklevel=4)
            )

    def _stop_torch(self) -> Optional[dict]:
        if self.torch_profiler is None:
            return None
        prof, self.torch_profiler = self.torch_profiler, None
        prof.__exit__(None, None, None)
        tmp = self.rank_path.with_suffix(".torch.json")
        prof.export_chrome_trace(str(tmp))
        doc = json.loads(tmp.read_text())
        tmp.unlink()
        return doc

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.stop(collective=exc_type is None)


def _activities(tp: Any) -> list:
    import torch

    acts = [tp.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(tp.ProfilerActivity.CUDA)
    return acts


def _marker_us(doc: dict) -> Optional[float]:
    for e in doc.get("traceEvents", []):
        if e.get("name") == CLOCK_MARKER and e.get("ph") == "X":
            return float(e["ts"])
    return None


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def profile(
    directory: Union[str, Path],
    comm: Any = None,
    torch: Union[bool, dict] = False,
    events_per_thread: Optional[int] = None,
) -> Profile:
    """Records every pycomm op of this process while the block runs and writes the traces to `directory`
    (made if missing; shared by every rank, as rank 0 reads the others' files to merge them). Collective
    over `comm` (default pycomm.world()): every rank enters and leaves the block. `torch`: True (or the
    keyword arguments of torch.profiler.profile) runs torch's profiler inside, so each rank's file and the
    merged one hold torch's events and pycomm's on one timeline. `events_per_thread`: the ring budget
    (default PYCOMM_TRACE_EVENTS)."""
    if comm is None:
        from pycomm.process_comms import world

        comm = world()
    return Profile(directory, comm, torch, events_per_thread)


# ---- PYCOMM_TRACE / PYCOMM_FLIGHT_RECORDER: the whole program -------------------------------------------
_PROGRAM: Optional[Profile] = None
_RUNNING: Optional[Profile] = None


def start_from_environment(world: Any) -> None:
    """Called by pycomm.init(): PYCOMM_TRACE starts a profile of the whole run; PYCOMM_FLIGHT_RECORDER
    alone only keeps the rings recording (for the flight recorder's dump)."""
    global _PROGRAM
    flight_recorder.start_from_environment(world.rank, world.size)
    directory = settings.get("PYCOMM_TRACE")
    if directory is not None:
        _PROGRAM = profile(directory, world).start()
    elif settings.get("PYCOMM_FLIGHT_RECORDER") is not None:
        tracing.enable()


def stop_from_environment() -> None:
    """Called by pycomm.finalize() before the communicators shut down."""
    global _PROGRAM
    program, _PROGRAM = _PROGRAM, None
    if program is not None:
        try:
            program.stop()
        except Exception as e:  # a rank that died must not turn every other rank's exit into a hang
            warnings.warn(f"PYCOMM_TRACE: the trace could not be completed: {e}", RuntimeWarning, stacklevel=2)
