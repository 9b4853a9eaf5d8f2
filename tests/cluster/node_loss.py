"""Losing a node of the emulated cluster (benchmarks/cluster.py) for real: its processes of a job found by
their command line and killed with SIGKILL, as a node's power failing would leave them."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from benchmarks.cluster import Cluster, node_pids
from tests.launch import ROOT

WATCHDOG_S = 240  # a job that never gets going fails its test, not CI


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:  # ended meanwhile
        return ""


def kill_node(cluster: Cluster, node: int, marker: str) -> list[int]:
    """SIGKILL every process of `node` whose command line holds `marker` (a job's ranks); their pids."""
    pids = [p for p in node_pids(cluster.namespace(node)) if marker in command_line(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def read_until(proc: subprocess.Popen, mark: str, count: int = 1) -> str:
    """What `proc` printed up to the `count`-th occurrence of `mark` (ranks' lines may arrive joined on one
    line, so occurrences are counted in the text, not by line); all of it when it ends first."""
    lines = []
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line)
        if "".join(lines).count(mark) >= count:
            break
    return "".join(lines)


# mpirun names a killed rank and its node; where a survivor's broken connection is reported first, Open MPI's
# TCP transport names the peer's node instead
LOST_NODE1 = (r"process rank [23] with PID \d+ on node node1 exited on signal 9", r"Peer host:\s+node1\b")


@contextmanager
def job(argv: Sequence[str], env: Mapping[str, str]) -> Iterator[subprocess.Popen]:
    """A job started with its output merged into one text pipe; killed at WATCHDOG_S, and on leaving."""
    proc = subprocess.Popen(
        list(argv), cwd=ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watchdog = threading.Timer(WATCHDOG_S, proc.kill)
    watchdog.start()
    try:
        yield proc
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
