"""pycomm.launch_env.detect on the environments of each launcher (plain dicts, no processes)."""
from __future__ import annotations

import pytest

from pycomm.launch_env import LaunchEnv, detect, expand_tasks_per_node, first_host


def test_single_process():
    assert detect({}) == LaunchEnv(0, 1, 0, 1, "single")


def test_open_mpi():
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    e = detect(env)
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (3, 8, 1, 4, "openmpi")
    assert e.mpi_launched


def test_mpich_pmi():
    e = detect({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"})
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (2, 3, 0, 1, "mpich")


def test_torchrun():
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1",
           "MASTER_PORT": "29500"}
    e = detect(env)
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (5, 8, 1, 4, "torchrun")
    assert (e.master_addr, e.master_port) == ("10.0.0.1", 29500)
    assert not e.mpi_launched


def test_srun_step():
    env = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_STEP_TASKS_PER_NODE": "4,3", "SLURM_STEP_NODELIST": "nid[0007-0008]", "SLURM_NTASKS": "7"}
    e = detect(env)
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (5, 7, 1, 3, "slurm")
    assert e.master_addr == "nid0007" and e.master_port is None


def test_sbatch_script_without_srun_is_single():
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"}).launcher == "single"


def test_slurm_helpers():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert first_host("gpu1,gpu2") == "gpu1"
    assert first_host("a[10,12-14]") == "a10"
    with pytest.raises(ValueError, match="tasks-per-node"):
        expand_tasks_per_node("two")


def test_bad_values_name_the_variable():
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_RANK"):
        detect({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="outside a world of size 2"):
        detect({"PMI_RANK": "2", "PMI_SIZE": "2"})
