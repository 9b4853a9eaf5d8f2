"""Blocking ops run on the caller's thread when the queue is idle, through the progress thread
otherwise (tests/comm/workers/inline_path.py), under each PYCOMM_INLINE_BYTES setting: 1 MiB, a small
limit, and 0 (the default: the caller-thread path off)."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("inline_bytes", ["1048576", "4096", "0"], ids=["1MiB", "4KiB", "off"])
def test_blocking_ops_inline_or_queued_keep_order(inline_bytes):
    env = {"PYCOMM_INLINE_BYTES": inline_bytes, "PYCOMM_TIMEOUT": "30"}
    proc = mpirun(2, "tests.comm.workers.inline_path", env=env, timeout=300)
    passed = re.findall(r"rank (\d+): (\d+) inline-path checks passed", proc.stdout)
    assert sorted(int(r) for r, _ in passed) == [0, 1], proc.stdout
    assert all(int(n) == 8 for _, n in passed), proc.stdout


@pytest.mark.mpi
def test_malformed_inline_bytes_is_a_clear_error():
    proc = mpirun(
        2, "tests.comm.workers.inline_path", env={"PYCOMM_INLINE_BYTES": "lots"}, expect_ok=False, timeout=120
    )
    assert proc.returncode != 0
    assert "PYCOMM_INLINE_BYTES='lots' is not valid: expected a whole number of bytes" in proc.stdout + proc.stderr
