"""The collectives suite (tests/comm/workers/collectives.py: every Communicator op against numpy, all dtypes,
async, overlap, split, bad input) as tasks of an `srun --mpi=pmix` step on the test session's single-node
SLURM (tests/slurm.py). pycomm.init() must take rank and size from SLURM's environment (the worker asserts
the launcher is "slurm"), and the MPI transport must be wired up by srun's PMIx, not by mpirun."""
from __future__ import annotations

import re

import pytest

import pycomm
from tests.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("tasks,env", [
    (2, {}), (3, {"PYCOMM_DEBUG": "1", "PYCOMM_MPI_NONBLOCKING": "1"}),
], ids=["2tasks", "3tasks-debug-nonblocking"])
def test_collectives_under_srun_pmix(slurm: SlurmCluster, tasks: int, env: dict[str, str]) -> None:
    if not pycomm.build_info()["mpi"]:
        pytest.skip("pycomm was built without MPI: srun --mpi=pmix needs the MPI transport")
    proc = slurm.srun(tasks, "tests.comm.workers.collectives", "--launcher", "slurm", env=env, timeout=600)
    launchers = re.findall(r"rank (\d+): launcher (\w+)", proc.stdout)
    assert sorted(launchers) == [(str(r), "slurm") for r in range(tasks)], proc.stdout
    passed = re.findall(r"rank (\d+)/(\d+) \(mpi\): (\d+) checks passed", proc.stdout)
    assert sorted((int(r), int(n)) for r, n, _ in passed) == [(r, tasks) for r in range(tasks)], proc.stdout
    assert all(int(n) > 300 for _, _, n in passed), proc.stdout
