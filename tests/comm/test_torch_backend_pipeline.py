"""torch.distributed.pipelining's Schedule1F1B on backend "pycomm" (tests/comm/workers/torch_backend_pipeline.py):
2 stages, the same parameters bit for bit as on gloo; the stages' sends are counted in pycomm's stats."""
from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
def test_1f1b_on_pycomm_matches_gloo():
    proc = mpirun(2, "tests.comm.workers.torch_backend_pipeline",
                  env={"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"})
    assert sorted(re.findall(r"rank (\d): 1f1b on pycomm == gloo", proc.stdout)) == ["0", "1"], proc.stdout
