"""Start-up phase timestamps: where a job's first seconds go, per process (PYCOMM_PROFILE_STARTUP).

With PYCOMM_PROFILE_STARTUP=FILE set, every process of a job (the `--nproc` launcher and each rank;
child processes inherit the variable) appends one JSON line to FILE per phase it finishes:
{"phase", "t" (wall-clock seconds since the epoch), "pid", "launcher", "rank", "size"}. The first line
of each process is `process_start`, read from the kernel (Linux), so interpreter start-up counts too.
Each line is written with one O_APPEND write, so processes of one node may share the file; without
the variable `mark` does nothing.

pycomm marks `torch_imported`, `pycomm_imported`, `mpi_init` (MPI's own start-up, mpi backend only)
and `init` (pycomm.init() returned); apps.train marks its own phases up to `first_step`; a script
marks its own with `pycomm.startup_profile.mark("name")`.

    python -m pycomm.startup_report FILE    # the phases of each process, as a table (pycomm/startup_report.py)"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

ENV = "PYCOMM_PROFILE_STARTUP"
PROCESS_START = "process_start"
_UNSET = object()
_path: object = _UNSET  # read once (the variable is fixed for a process's start-up)
_started: set[int] = set()  # pids that wrote their process_start line (a fork writes its own)


def enabled() -> bool:
    return _target() is not None


def _target() -> Optional[str]:
    global _path
    if _path is _UNSET:
        from pycomm import settings  # settings imports nothing heavy; late so this module stays leaf-light

        _path = settings.get(ENV)
    return _path  # type: ignore[return-value]


def process_start_time() -> Optional[float]:
    """When this process was created (wall clock, to the kernel's clock tick), from /proc/self/stat's start
    time since boot against CLOCK_BOOTTIME now; None where there is neither."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: starttime, clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age


def _who() -> dict:
    from pycomm.launch_env import detect

    try:
        env = detect()
    except ValueError:  # a malformed launch environment is pycomm.init()'s to report, not the profile's
        return {"pid": os.getpid(), "launcher": "unknown", "rank": -1, "size": 0}
    return {"pid": os.getpid(), "launcher": env.launcher, "rank": env.rank, "size": env.size}


def _write(path: str, record: dict) -> None:
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short write in append mode: lines of concurrent processes never interleave
    finally:
        os.close(fd)


def mark(phase: str, at: Optional[float] = None) -> None:
    """Records that `phase` ended now (or at the wall-clock time `at`, from time.time()); nothing when
    profiling is off (the arguments are checked either way)."""
    if not isinstance(phase, str) or not phase:
        raise ValueError(f"startup_profile.mark: phase must be a non-empty str, got {phase!r}")
    if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))):
        raise TypeError(f"startup_profile.mark: at must be a time.time() value (float) or None, got {at!r}")
    path = _target()
    if path is None:
        return
    t = time.time() if at is None else float(at)
    who = _who()
    if os.getpid() not in _started:
        _started.add(os.getpid())
        start = process_start_time()
        if start is not None:
            _write(path, {"phase": PROCESS_START, "t": start, **who})
    _write(path, {"phase": phase, "t": t, **who})
