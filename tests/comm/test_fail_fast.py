"""A plain script under mpirun (no apps, no try/except of its own) whose rank 1 fails ends the whole job
within seconds, not after PYCOMM_TIMEOUT (pycomm/fail_fast.py): an uncaught exception before a
collective the other rank waits in, with rank 1's traceback; and a rank that exits with an op it never
waited for, once the op stalls. PYCOMM_TIMEOUT stays at 120 s for the first case: only the excepthook
can end it in time."""

from __future__ import annotations

import time

import pytest

from tests.launch import mpirun

DEADLINE_S = 60  # half the 120 s PYCOMM_TIMEOUT, and room for two ranks' start on a loaded machine


def failing_job(mode: str, timeout_s: str) -> tuple[int, float, str]:
    """(exit code, seconds to the end, output) of tests/comm/workers/fail_fast.py MODE on 2 ranks."""
    t0 = time.monotonic()
    proc = mpirun(
        2, "tests.comm.workers.fail_fast", mode, env={"PYCOMM_TIMEOUT": timeout_s}, expect_ok=False, timeout=100
    )
    return proc.returncode, time.monotonic() - t0, proc.stdout + proc.stderr


@pytest.mark.mpi
def test_an_uncaught_exception_on_one_rank_ends_the_job_at_once() -> None:
    code, took, out = failing_job("raise", "120")
    assert code != 0 and took < DEADLINE_S, f"exit {code} after {took:.1f} s\n{out}"
    assert "MARK rank 0 started" in out and "got past" not in out, out
    assert "Traceback" in out and "ValueError: bad input on rank 1" in out, out  # rank 1's own traceback
    assert "pycomm: rank 1 of 2 raised an uncaught ValueError; ending the job (PYCOMM_FAIL_FAST=0" in out, out
    assert "StallError" not in out, out


@pytest.mark.mpi
def test_a_rank_leaving_with_an_op_in_flight_ends_the_job_when_it_stalls() -> None:
    code, took, out = failing_job("left_in_flight", "3")
    assert code != 0 and took < 60, f"exit {code} after {took:.1f} s\n{out}"  # rank 0 sleeps 120 s
    assert (
        "pycomm: rank 1 of 2 is exiting with 1 op(s) it never waited for on its world communicator, and one "
        "failed (StallError: allreduce"
    ) in out, out
