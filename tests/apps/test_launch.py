"""Spawning ranks for --nproc, the mpirun command it uses, and MASTER_ADDR from the SLURM node list."""

from __future__ import annotations

import os

import pytest

from apps import launch


def test_spawn_only_when_alone_and_asked() -> None:
    """pycomm.launch_env reads the launchers (tested there); apps spawns ranks only for a lone process."""
    assert launch.should_spawn(2, {}) and not launch.should_spawn(1, {})
    assert not launch.should_spawn(2, {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"})
    assert not launch.should_spawn(
        2, {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "2"}
    )
    assert not launch.should_spawn(2, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert launch.should_spawn(2, {"SLURM_PROCID": "0", "SLURM_NTASKS": "8"})  # an sbatch shell, not srun
    assert not launch.should_spawn(2, {launch.SPAWNED: "1"})


def test_rendezvous_address_from_the_slurm_node_list(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT"):  # set first, so that monkeypatch removes what the export writes:
        monkeypatch.setenv(key, "")  # left behind, it sent the later srun-like tasks of
        monkeypatch.delenv(key)  # tests/cluster to rendezvous at frontier00012
    env = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_JOB_NODELIST": "frontier[00012-00015,00020]",
        "SLURM_JOB_ID": "1234",
    }
    launch.export_rendezvous(launch.detect(env))
    assert os.environ["MASTER_ADDR"] == "frontier00012" and os.environ["MASTER_PORT"] == str(29500 + 234)


def test_mpirun_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/usr/bin/mpirun")
    cmd = launch.mpirun_command(3, ["--config", "x.yaml"])
    assert cmd[:3] == ["/usr/bin/mpirun", "-n", "3"] and "--oversubscribe" in cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert cmd[-4:] == ["-m", "apps.train", "--config", "x.yaml"]
    assert launch.mpirun_command(2, ["--port", "1"], module="apps.serve")[-4:] == ["-m", "apps.serve", "--port", "1"]
    assert "odls_base_sigkill_timeout" not in cmd  # Open MPI's own 1 s unless asked
    graced = launch.mpirun_command(2, [], term_grace_s=5)
    assert graced[graced.index("odls_base_sigkill_timeout") - 1 :][:3] == ["--mca", "odls_base_sigkill_timeout", "5"]
    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs mpirun"):
        launch.mpirun_command(2, [])
