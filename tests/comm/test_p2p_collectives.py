"""pycomm's own host broadcast, all-gather and reduce-scatter on MPI point-to-point messages
(tests/comm/workers/p2p_collectives.py): exact results against numpy on 2, 3, 4 and 5 ranks (3 and 5
take the ring, 2 and 4 recursive doubling / halving), every root, dtype and reduce op, sizes either
side of each algorithm switch, async ops mixed with blocking ones, mismatched roots and sizes on the
scheduled path as MismatchError; and a rank that never calls gives the others StallError naming it,
on both the fused and the scheduled path of each collective."""
from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_collectives_against_numpy(ranks):
    proc = mpirun(ranks, "tests.comm.workers.p2p_collectives", env={"PYCOMM_TIMEOUT": "120"}, timeout=900)
    passed = re.findall(r"rank (\d+): (\d+) p2p-collective checks passed", proc.stdout)
    assert sorted(int(r) for r, _ in passed) == list(range(ranks)), proc.stdout
    assert all(int(n) > 400 for _, n in passed), proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_missing_rank_gives_stall_error_naming_it(ranks):
    proc = mpirun(ranks, "tests.comm.workers.p2p_collectives", "--stall", env={"PYCOMM_TIMEOUT": "3"},
                  expect_ok=False, timeout=900)
    out = proc.stdout + proc.stderr
    assert all(f"MARK rank {r} done" in out for r in range(ranks)), out
    last = ranks - 1
    for r in range(last):
        for kind in ("broadcast", "allgather", "reduce_scatter"):
            for numel in (100, 262144):
                m = re.search(rf"MARK rank {r} stall of {kind} {numel} after [\d.]+ s: (.*)", out)
                assert m, out
                msg = m.group(1)
                assert re.match(rf"{kind} #\d+ \(count \d+, float32", msg), msg
                waiting = re.search(r"waiting for ranks? ([\d, ]+):", msg)
                assert waiting and waiting.group(1) == str(last), msg
                assert "PYCOMM_TIMEOUT=3" in msg, msg
