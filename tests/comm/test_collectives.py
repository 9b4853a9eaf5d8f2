"""Every Communicator op against numpy on 1, 2, 3 and 4 real ranks (tests/comm/workers/collectives.py);
the 3-rank run also goes through PYCOMM_DEBUG=1's op matching (which must not fire on matching ops) and
nonblocking MPI collectives (PYCOMM_MPI_NONBLOCKING=1) instead of blocking ones on the queue thread.
The 2ranks-inline run lets blocking ops up to 1 MiB run on the caller's thread when the queue is
idle (PYCOMM_INLINE_BYTES; off by default)."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize(
    "ranks,env",
    [
        (1, {}),
        (2, {}),
        (2, {"PYCOMM_INLINE_BYTES": "1048576"}),
        (3, {"PYCOMM_DEBUG": "1", "PYCOMM_MPI_NONBLOCKING": "1"}),
        (4, {}),
    ],
    ids=["1rank", "2ranks", "2ranks-inline", "3ranks-debug-nonblocking", "4ranks"],
)
def test_collectives_against_numpy(ranks, env):
    proc = mpirun(ranks, "tests.comm.workers.collectives", "--launcher", "openmpi", env=env, timeout=600)
    passed = re.findall(r"rank (\d+)/(\d+) \(mpi\): (\d+) checks passed", proc.stdout)
    assert sorted(int(r) for r, _, _ in passed) == list(range(ranks)), proc.stdout
    assert all(int(n) > 300 for _, _, n in passed), proc.stdout


@pytest.mark.mpi
def test_adopts_mpi_initialised_by_mpi4py():
    proc = mpirun(2, "tests.comm.workers.adopt", timeout=300)
    assert proc.stdout.count("adopted") == 2, proc.stdout
