"""pycomm's own host all-reduce on MPI point-to-point messages (tests/comm/workers/p2p_allreduce.py):
exact results against numpy on 2, 3, 4 and 5 ranks (3 and 5 take the fold of recursive doubling and
the ring), every dtype and op, sizes either side of the fused limit, async ops mixed with blocking
ones; and a rank that never calls gives the others StallError naming it, on both paths."""
from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_allreduce_against_numpy(ranks):
    proc = mpirun(ranks, "tests.comm.workers.p2p_allreduce", env={"PYCOMM_TIMEOUT": "120"}, timeout=900)
    passed = re.findall(r"rank (\d+): (\d+) p2p-allreduce checks passed", proc.stdout)
    assert sorted(int(r) for r, _ in passed) == list(range(ranks)), proc.stdout
    assert all(int(n) > 250 for _, n in passed), proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_missing_rank_gives_stall_error_naming_it(ranks):
    proc = mpirun(ranks, "tests.comm.workers.p2p_allreduce", "--stall", env={"PYCOMM_TIMEOUT": "3"},
                  expect_ok=False, timeout=900)
    out = proc.stdout + proc.stderr
    assert all(f"MARK rank {r} done" in out for r in range(ranks)), out
    last = ranks - 1
    for r in range(last):
        for numel in (1000, 32768):
            m = re.search(rf"MARK rank {r} stall of {numel} after [\d.]+ s: (.*)", out)
            assert m, out
            msg = m.group(1)
            assert re.match(rf"allreduce #\d+ \(count {numel}, float32", msg), msg
            waiting = re.search(r"waiting for ranks? ([\d, ]+):", msg)
            assert waiting and waiting.group(1) == str(last), msg
            assert "PYCOMM_TIMEOUT=3" in msg, msg
