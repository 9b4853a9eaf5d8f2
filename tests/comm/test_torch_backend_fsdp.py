"""FSDP2's fully_shard on backend "pycomm" (tests/comm/workers/torch_backend_fsdp.py): the same parameters
as on gloo after a few steps, on 2 ranks (bit for bit) and as HSDP on a (2, 2) DeviceMesh of 4 ranks, whose
dimension groups are pycomm sub-communicators; FSDP2's reduce-scatters are counted in pycomm's stats."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun

ENV = {"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"}


@pytest.mark.mpi
@pytest.mark.parametrize("kind,ranks", [("1d", 2), ("hsdp", 4)])
def test_fully_shard_on_pycomm_matches_gloo(kind, ranks):
    proc = mpirun(ranks, "tests.comm.workers.torch_backend_fsdp", kind, env=ENV, timeout=400)
    passed = sorted(re.findall(rf"rank (\d): fsdp2 {kind} on pycomm == gloo", proc.stdout))
    assert passed == [str(r) for r in range(ranks)], proc.stdout
