"""torch.distributed.pipelining's Schedule1F1B on backend "pycomm" (tests/comm/workers/torch_backend_pipeline.py):
2 and 4 stages, the same parameters bit for bit as on gloo; the stages' sends are counted in pycomm's stats."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun


@pytest.mark.mpi
@pytest.mark.parametrize("stages", [2, 4])
def test_1f1b_on_pycomm_matches_gloo(stages):
    proc = mpirun(
        stages,
        "tests.comm.workers.torch_backend_pipeline",
        env={"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"},
    )
    assert sorted(re.findall(r"rank (\d): 1f1b on pycomm == gloo", proc.stdout)) == [str(r) for r in range(stages)], (
        proc.stdout
    )
