"""Ranks that disagree on an op get a MismatchError naming both ranks' ops, sequence numbers and sizes,
in the default mode and under PYCOMM_DEBUG=1, on every path (tests/comm/workers/mismatch.py): the ring
all-reduce at 40 vs 48 MiB (it used to corrupt the smaller rank's memory), MPI's collectives queued,
on the caller's thread (PYCOMM_INLINE_BYTES) and nonblocking, with the small collectives' data in op
matching (PYCOMM_EAGER_BYTES=65536), broadcasts matched one way (a wrong root, size or dtype: the
receiver raises in the broadcast with its buffer untouched, the root at its next op), point-to-point, allreduce_quantized
(also against a plain allreduce) and allreduce_coalesced; and the same collective and compound cases on
the gloo transport under torchrun (its signature exchange on a private group: a broadcast whose root
differs used to deliver root 0's data, a size mismatch to abort the process inside gloo), where a
communicator broken by a mismatch posts nothing more (a lone exchange left in gloo froze its rank for
PYCOMM_TIMEOUT when the group was collected, and the peer's next split timed out)."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun, torchrun

CASES = 26  # the cases of tests/comm/workers/mismatch.py on MPI
P2P_CASES = 6  # of them, point to point (MPI only: gloo's are tests/comm/workers/gloo_edges.py's)
ONE_WAY_ONLY = 2  # of them, one-way broadcast cases (scheduled sizes, dtypes) that gloo's symmetric matching has not
GLOO_ONLY = 3  # gloo's own: two communicators broken, then released while the peer keeps its own


@pytest.mark.mpi
@pytest.mark.parametrize(
    "env",
    [
        {},
        {"PYCOMM_INLINE_BYTES": "1048576"},
        {"PYCOMM_MPI_NONBLOCKING": "1"},
        {"PYCOMM_DEBUG": "1"},
        {"PYCOMM_EAGER_BYTES": "65536"},
    ],
    ids=["default", "on-caller-thread", "nonblocking-collectives", "debug", "data-in-op-matching"],
)
def test_mismatched_ops_raise_naming_both(env):
    proc = mpirun(2, "tests.comm.workers.mismatch", env={"PYCOMM_TIMEOUT": "60", **env}, timeout=600)
    passed = re.findall(r"rank (\d): (\d+) mismatch cases passed", proc.stdout)
    assert sorted(passed) == [("0", str(CASES)), ("1", str(CASES))], proc.stdout


@pytest.mark.mpi
def test_ranks_that_agree_hear_of_the_one_that_differs():
    proc = mpirun(3, "tests.comm.workers.mismatch", env={"PYCOMM_TIMEOUT": "60"}, timeout=300)
    passed = re.findall(r"rank (\d): (\d+) mismatch cases passed", proc.stdout)
    assert sorted(passed) == [("0", "1"), ("1", "1"), ("2", "1")], proc.stdout


def test_mismatched_collectives_raise_naming_both_on_gloo():
    proc = torchrun(2, "tests.comm.workers.mismatch", "gloo", env={"PYCOMM_TIMEOUT": "60"}, timeout=600)
    passed = re.findall(r"rank (\d): (\d+) mismatch cases passed", proc.stdout)
    gloo_cases = str(CASES - P2P_CASES - ONE_WAY_ONLY + GLOO_ONLY)
    assert sorted(passed) == [("0", gloo_cases), ("1", gloo_cases)], proc.stdout
