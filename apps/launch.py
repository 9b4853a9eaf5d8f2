"""Which launcher started us (Open MPI's mpirun, MPICH/PMI, torchrun, SLURM's srun, or none), and
`--nproc N` on one machine: re-run ourselves under `mpirun -n N` and supervise it.

pycomm.init reads the same variables to build its communicator; this module only needs them
before that (to decide whether to spawn ranks, and to set MASTER_ADDR for a TCP rendezvous)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

# Set on the ranks we spawn, so they never spawn again.
SPAWNED = "PYCOMM_APPS_SPAWNED"


@dataclass(frozen=True)
class LaunchEnv:
    launcher: str          # openmpi | pmi | torchrun | slurm | none
    rank: int
    size: int
    local_rank: int
    master_addr: str | None = None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: 'frontier[00012-00015,00020],login1' -> 'frontier00012'."""
    nodelist = nodelist.strip()
    if not nodelist:
        raise ValueError("empty SLURM node list")
    m = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist)
    if not m:
        raise ValueError(f"cannot parse SLURM node list {nodelist!r}")
    prefix, ranges = m.group(1), m.group(3)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    for name in names:
        if name in env:
            try:
                return int(env[name])
            except ValueError:
                raise ValueError(f"environment variable {name}={env[name]!r} is not an integer") from None
    if default is None:
        raise KeyError(names[0])
    return default


def detect(env: Mapping[str, str] | None = None) -> LaunchEnv:
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    master = env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else None)
    if "OMPI_COMM_WORLD_SIZE" in env:
        return LaunchEnv("openmpi", _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE"),
                         _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", default=0), master)
    if "PMI_SIZE" in env and "PMI_RANK" in env:
        return LaunchEnv("pmi", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"),
                         _int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", default=0), master)
    if "WORLD_SIZE" in env and "RANK" in env:
        return LaunchEnv("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK", default=0),
                         master)
    # Inside srun (not merely inside an sbatch script, whose shell also has SLURM_PROCID=0).
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return LaunchEnv("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS"),
                         _int(env, "SLURM_LOCALID", default=0), master)
    return LaunchEnv("none", 0, 1, 0, master)


def export_rendezvous(launch: LaunchEnv) -> None:
    """MASTER_ADDR/MASTER_PORT for backends that rendezvous over TCP (NCCL/RCCL without MPI)."""
    if launch.master_addr and "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = launch.master_addr
    if "MASTER_PORT" not in os.environ and "SLURM_JOB_ID" in os.environ:
        os.environ["MASTER_PORT"] = str(29500 + int(os.environ["SLURM_JOB_ID"]) % 1000)  # jobs sharing a node differ


def should_spawn(nproc: int, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return nproc > 1 and detect(env).launcher == "none" and SPAWNED not in env


def mpirun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError(f"--nproc {nproc} needs mpirun (apt-get install openmpi-bin), or start the ranks "
                           "yourself with srun / torchrun; --nproc 1 runs one process")
    cmd = [mpirun, "-n", str(nproc), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")   # containers often run as root; Open MPI refuses without it
    return cmd + [sys.executable, "-m", "apps.train", *argv]


def spawn(nproc: int, argv: Sequence[str]) -> int:
    """Run `argv` on nproc local ranks under mpirun; SIGTERM/SIGUSR1 to us reach the ranks as SIGUSR1
    (Open MPI forwards SIGUSR1, but answers SIGTERM by killing the job), so they save and exit."""
    cmd = mpirun_command(nproc, argv)
    env = dict(os.environ)
    env[SPAWNED] = "1"
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: object) -> None:
        proc.send_signal(signal.SIGUSR1)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        return proc.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
