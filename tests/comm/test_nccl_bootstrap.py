"""The NCCL unique id's journey from rank 0 to every rank, on CPU with real processes: over the TCP
store (torchrun-style environment without torchrun), over torchrun's own agent store, and over MPI.
The id itself needs NCCL; these send 128 known bytes the same way (pycomm.nccl_backend)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest

import pycomm
from tests.launch import ROOT, have_mpirun, mpirun, worker_env

WORKER = "tests.comm.workers.share_id"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = worker_env(extra)
    for key in list(env):
        if key.startswith(("OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_")) and key not in extra:
            del env[key]
    return env


@pytest.mark.parametrize("world, timeout", [(2, "120"), (3, "120"), (2, "0")])
def test_id_travels_over_the_tcp_store(world, timeout):
    """PYCOMM_TIMEOUT=0 (no timeout) must start NCCL as well (the store once refused it)."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", WORKER, "store"],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=clean_env(
                {
                    "RANK": str(r),
                    "WORLD_SIZE": str(world),
                    "LOCAL_RANK": str(r),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "PYCOMM_TIMEOUT": timeout,
                }
            ),
        )
        for r in range(world)
    ]
    try:
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"rank {r} of {world} (torchrun, agent store no): ok" in out, out


@pytest.mark.parametrize("timeout", ["120", "0"])
def test_id_travels_over_torchruns_agent_store(timeout):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun not found")
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "-m",
        WORKER,
        "torchrun",
    ]
    p = subprocess.run(
        argv, cwd=ROOT, env=clean_env({"PYCOMM_TIMEOUT": timeout}), capture_output=True, text=True, timeout=600
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "rank 0 of 2 (torchrun" in out and "rank 1 of 2 (torchrun" in out, out


@pytest.mark.mpi
def test_id_travels_over_mpi():
    if not pycomm.build_info()["mpi"] or not have_mpirun():
        pytest.skip("needs MPI")
    proc = mpirun(3, WORKER, "mpi", timeout=300)
    for r in range(3):
        assert f"rank {r} of 3 (openmpi, agent store no): ok" in proc.stdout, proc.stdout


def test_missing_master_port_is_named():
    from pycomm import nccl_backend
    from pycomm.launch_env import LaunchEnv

    with pytest.raises(pycomm.PycommError, match="MASTER_PORT"):
        nccl_backend.share_from_rank0(LaunchEnv(1, 2, 1, 2, "torchrun", "127.0.0.1", None), None, 128)
