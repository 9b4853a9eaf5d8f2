"""pycomm.launch_env.detect on the environments of each launcher (plain dicts, no processes)."""

from __future__ import annotations

import pytest

from pycomm.launch_env import LaunchEnv, detect, expand_tasks_per_node, first_host


def test_single_process():
    assert detect({}) == LaunchEnv(0, 1, 0, 1, "single")


def test_open_mpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
    }
    e = detect(env)
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (3, 8, 1, 4, "openmpi")
    assert e.mpi_launched


def test_mpich_pmi():
    e = detect({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"})
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (2, 3, 0, 1, "mpich")


def test_torchrun():
    env = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    e = detect(env)
    assert (e.rank, e.size, e.local_rank, e.local_size, e.launcher) == (5, 8, 1, 4, "torchrun")
    assert (e.master_addr, e.master_port) == ("10.0.0.1", 29500)
    assert not e.mpi_launched


def test_srun_step():
    env = {
        "SLURM_PROCID": "5",
        "SLURM_STEP_NUM_TASKS": "7",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "4,3",
        "SLURM_STEP_NODELIST": "nid[0007-0008]",
        "SLURM_NTASKS": "7",
    }
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


def test_mpi_wireup_is_read_apart_from_the_launcher():
    step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "2"}
    assert detect({**step, "PMIX_RANK": "1"}).mpi_wireup == "pmix"  # srun --mpi=pmix
    none = detect(step)  # srun --mpi=none
    assert (none.launcher, none.mpi_wireup, none.mpi_launched) == ("slurm", None, False)
    assert detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}).mpi_launched
    assert not detect({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}).mpi_launched


def test_slurm_jobs_get_a_default_master_port():
    step = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_JOB_NODELIST": "nid[0007-0008]",
        "SLURM_JOB_ID": "123456",
    }
    e = detect(step)
    assert (e.master_addr, e.master_port) == ("nid0007", 29500 + 456)
    e = detect({**step, "MASTER_PORT": "4000", "MASTER_ADDR": "head"})
    assert (e.master_addr, e.master_port) == ("head", 4000)  # the user's own win
    assert detect({}).master_port is None
    with pytest.raises(ValueError, match="SLURM_JOB_ID"):
        detect({**step, "SLURM_JOB_ID": "abc"})


@pytest.mark.parametrize("port", ["abc", "0", "70000", "-5", "29500x"])
def test_garbage_master_port_names_the_variable(port):
    with pytest.raises(ValueError, match=rf"MASTER_PORT='{port}'.*\[1, 65535\]"):
        detect({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": port})


def test_rank_without_world_size_names_the_missing_variable():
    with pytest.raises(ValueError, match="RANK='1' is set but WORLD_SIZE is not"):
        detect({"RANK": "1"})
    with pytest.raises(ValueError, match="WORLD_SIZE='4' is set but RANK is not"):
        detect({"WORLD_SIZE": "4", "MASTER_ADDR": "h"})
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        detect({"RANK": "x", "WORLD_SIZE": "2"})


def test_rank_and_world_size_by_hand():
    e = detect({"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501"})
    assert (e.rank, e.size, e.launcher, e.master_port, e.mpi_launched) == (2, 3, "env", 29501, False)
    # inside an srun step SLURM's own variables (with local ranks) take precedence over RANK set by a script
    step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "RANK": "1"}
    assert detect(step).launcher == "slurm"
