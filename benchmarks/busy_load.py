"""A controlled busy machine for the benchmarks' busy cases, and what the machine's load was: one
busy-loop process pinned to each core while inside `busy_cores()` (started and stopped by the benchmark,
so a busy figure does not depend on who else happens to use the machine), and `machine_load()`, the load
average and the runnable threads right now, recorded beside each measurement."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator


def _die_with_parent() -> None:
    """In the child before exec: killed when the benchmark dies, even by SIGKILL (Linux prctl), so that
    an interrupted benchmark leaves no busy loops behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """One busy-loop process pinned to each core for the duration (the ranks' cores fully taken)."""
    procs = [
        subprocess.Popen(
            ["taskset", "-c", str(c), sys.executable, "-c", "while True: pass"], preexec_fn=_die_with_parent
        )
        for c in sorted(os.sched_getaffinity(0))
    ]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def machine_load() -> dict[str, float]:
    """/proc/loadavg now: the 1-minute load average and the threads runnable at this instant, with the
    number of online CPUs they compete for."""
    with open("/proc/loadavg") as f:
        one, _, _, running, _ = f.read().split()
    return {"loadavg_1m": float(one), "runnable": int(running.split("/")[0]), "cpus": os.cpu_count() or 1}
