"""The collectives suite (tests/comm/workers/collectives.py: every Communicator op against numpy, all dtypes,
async, overlap, split, bad input) as tasks of an srun step on the test session's single-node SLURM
(tests/slurm.py). pycomm.init() must take rank and size from SLURM's environment (the worker asserts
the launcher is "slurm"). Under `srun --mpi=pmix` the MPI transport is wired up by srun's PMIx, not by
mpirun; under `srun --mpi=none` (maxie's way on Frontier, MASTER_ADDR set) MPI cannot join the
tasks and backend="auto" must pick gloo, meeting at the job's default MASTER_PORT."""

from __future__ import annotations

import re

import pytest

import pycomm
from tests.slurm import SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize(
    "tasks,env",
    [
        (2, {}),
        (3, {"PYCOMM_DEBUG": "1", "PYCOMM_MPI_NONBLOCKING": "1"}),
    ],
    ids=["2tasks", "3tasks-debug-nonblocking"],
)
def test_collectives_under_srun_pmix(slurm: SlurmCluster, tasks: int, env: dict[str, str]) -> None:
    if not pycomm.build_info()["mpi"]:
        pytest.skip("pycomm was built without MPI: srun --mpi=pmix needs the MPI transport")
    proc = slurm.srun(tasks, "tests.comm.workers.collectives", "--launcher", "slurm", env=env, timeout=600)
    launchers = re.findall(r"rank (\d+): launcher (\w+)", proc.stdout)
    assert sorted(launchers) == [(str(r), "slurm") for r in range(tasks)], proc.stdout
    passed = re.findall(r"rank (\d+)/(\d+) \(mpi\): (\d+) checks passed", proc.stdout)
    assert sorted((int(r), int(n)) for r, n, _ in passed) == [(r, tasks) for r in range(tasks)], proc.stdout
    assert all(int(n) > 300 for _, _, n in passed), proc.stdout


def test_collectives_under_srun_mpi_none_use_gloo(slurm: SlurmCluster) -> None:
    proc = slurm.srun(
        2,
        "tests.comm.workers.collectives",
        "--launcher",
        "slurm",
        mpi="none",
        env={"MASTER_ADDR": "127.0.0.1"},
        timeout=600,
    )
    passed = re.findall(r"rank (\d+)/(\d+) \((\w+)\): (\d+) checks passed", proc.stdout)
    assert sorted((int(r), int(n), b) for r, n, b, _ in passed) == [(0, 2, "gloo"), (1, 2, "gloo")], proc.stdout
    assert all(int(c) > 300 for *_, c in passed), proc.stdout
