"""Launcher detection (Open MPI, PMI, torchrun, srun, none), SLURM node lists, the --nproc command."""
from __future__ import annotations

import os

import pytest

from apps import launch


@pytest.mark.parametrize("nodelist, first", [("frontier[00012-00015,00020],login1", "frontier00012"),
                                             ("node7", "node7"), ("a[1,3]", "a1"), ("x1,x2", "x1")])
def test_first_host(nodelist: str, first: str) -> None:
    assert launch.first_host(nodelist) == first


@pytest.mark.parametrize("env, expected", [
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, ("openmpi", 1, 2, 1)),
    ({"PMI_RANK": "3", "PMI_SIZE": "4"}, ("pmi", 3, 4, 0)),
    ({"RANK": "2", "WORLD_SIZE": "8", "LOCAL_RANK": "2"}, ("torchrun", 2, 8, 2)),
    ({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "1"}, ("slurm", 5, 8, 1)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "9"}, ("none", 0, 1, 0)),  # sbatch shell, no srun
    ({}, ("none", 0, 1, 0)),
])
def test_detect(env: dict, expected: tuple) -> None:
    got = launch.detect({**env, "SLURM_JOB_NODELIST": "n[07-08]"})
    assert (got.launcher, got.rank, got.size, got.local_rank) == expected
    assert got.master_addr == "n07"


def test_bad_variable_is_named() -> None:
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_RANK='x'"):
        launch.detect({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"})


def test_spawn_only_when_alone_and_asked() -> None:
    assert launch.should_spawn(2, {}) and not launch.should_spawn(1, {})
    assert not launch.should_spawn(2, {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"})
    assert not launch.should_spawn(2, {launch.SPAWNED: "1"})


def test_mpirun_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/usr/bin/mpirun")
    cmd = launch.mpirun_command(3, ["--config", "x.yaml"])
    assert cmd[:3] == ["/usr/bin/mpirun", "-n", "3"] and "--oversubscribe" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[-4:] == ["-m", "apps.train", "--config", "x.yaml"]
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs mpirun"):
        launch.mpirun_command(2, [])
