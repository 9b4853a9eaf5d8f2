"""backend="auto": which transport each launch gets (pycomm.backends.choose_auto on launch_env.detect of
each launcher's variables; no processes)."""

from __future__ import annotations

import pytest

import pycomm
from pycomm import backends
from pycomm.launch_env import detect

STEP = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1"}


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, "local"),  # plain python
        ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, "local"),  # torchrun, one rank
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            "gloo",
        ),  # torchrun
        (STEP, "gloo"),  # srun --mpi=none
        ({"RANK": "1", "WORLD_SIZE": "2"}, "gloo"),  # env:// by hand
        ({**STEP, "PMIX_RANK": "0"}, "mpi"),  # srun --mpi=pmix
        ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, "mpi"),  # mpirun -n 1
    ],
    ids=["python", "torchrun-1", "torchrun-2", "srun-none", "env", "srun-pmix", "mpirun-1"],
)
def test_auto_backend_per_launcher(env, expected):
    if expected == "mpi" and not pycomm.build_info()["mpi"]:
        pytest.skip("this build of pycomm has no MPI")
    assert backends.choose_auto(detect(env)) == expected


def test_gloo_is_registered_and_named_in_errors():
    assert "gloo" in backends.names()
    with pytest.raises(ValueError, match="'gloo'"):
        backends.get("nonesuch")
