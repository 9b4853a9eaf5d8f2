"""pycomm's own host all-reduce on MPI point-to-point messages (tests/comm/workers/p2p_allreduce.py):
exact results against numpy on 2, 3, 4 and 5 ranks (3 and 5 take the fold of recursive doubling and
the ring), every dtype and op, sizes either side of the fused limit, async ops mixed with blocking
ones; and a rank that never calls gives the others StallError naming it, on both paths."""

from __future__ import annotations

import pytest

from tests.comm.rank_reports import assert_every_rank_passed, assert_stall_names_last_rank, run_stalled
from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_allreduce_against_numpy(ranks):
    proc = mpirun(ranks, "tests.comm.workers.p2p_allreduce", env={"PYCOMM_TIMEOUT": "120"}, timeout=900)
    assert_every_rank_passed(proc.stdout, "p2p-allreduce", ranks, at_least=250)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_missing_rank_gives_stall_error_naming_it(ranks):
    out = run_stalled("p2p_allreduce", ranks)
    for numel in (1000, 32768):
        assert_stall_names_last_rank(out, ranks, f"stall of {numel}", rf"allreduce #\d+ \(count {numel}, float32")
