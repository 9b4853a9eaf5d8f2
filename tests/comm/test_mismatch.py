"""Ranks that disagree on an op get a MismatchError naming both ranks' ops, sequence numbers and sizes,
in the default mode and under PYCOMM_DEBUG=1, on every path (tests/comm/workers/mismatch.py): the ring
all-reduce at 40 vs 48 MiB (it used to corrupt the smaller rank's memory), MPI's collectives queued,
on the caller's thread (PYCOMM_INLINE_BYTES) and nonblocking, point-to-point, allreduce_quantized
(also against a plain allreduce) and allreduce_coalesced."""
from __future__ import annotations

import re

import pytest

from tests.launch import mpirun

CASES = 24  # the cases of tests/comm/workers/mismatch.py


@pytest.mark.mpi
@pytest.mark.parametrize("env", [{}, {"PYCOMM_INLINE_BYTES": "1048576"}, {"PYCOMM_MPI_NONBLOCKING": "1"},
                                 {"PYCOMM_DEBUG": "1"}],
                         ids=["default", "on-caller-thread", "nonblocking-collectives", "debug"])
def test_mismatched_ops_raise_naming_both(env):
    proc = mpirun(2, "tests.comm.workers.mismatch", env={"PYCOMM_TIMEOUT": "60", **env}, timeout=600)
    passed = re.findall(r"rank (\d): (\d+) mismatch cases passed", proc.stdout)
    assert sorted(passed) == [("0", str(CASES)), ("1", str(CASES))], proc.stdout


@pytest.mark.mpi
def test_ranks_that_agree_hear_of_the_one_that_differs():
    proc = mpirun(3, "tests.comm.workers.mismatch", env={"PYCOMM_TIMEOUT": "60"}, timeout=300)
    passed = re.findall(r"rank (\d): (\d+) mismatch cases passed", proc.stdout)
    assert sorted(passed) == [("0", "1"), ("1", "1"), ("2", "1")], proc.stdout
