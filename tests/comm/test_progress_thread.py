"""The progress thread sleeps when it has nothing to poll, and stops holding a core while it waits for a
late peer (tests/comm/workers/progress_thread.py, on 2 real ranks; CPU times from /proc, not timings)."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
def test_progress_thread_sleeps_idle_and_while_a_peer_is_late():
    proc = mpirun(2, "tests.comm.workers.progress_thread", env={"PYCOMM_TIMEOUT": "60"}, timeout=240)
    reports = re.findall(r"rank (\d+): progress thread idle", proc.stdout)
    assert sorted(int(r) for r in reports) == [0, 1], proc.stdout + proc.stderr
