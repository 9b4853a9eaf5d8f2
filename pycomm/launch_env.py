"""Which rank this process is, as its launcher tells it: Open MPI's mpirun, MPICH/Hydra (PMI), torchrun,
SLURM's srun, torch's env:// variables set by hand (RANK, WORLD_SIZE), or none (a single process).
Pure function of the environment, so it is unit-tested with plain dicts.

Precedence, most specific first: Open MPI, MPICH/PMI, torchrun, SLURM (srun), RANK/WORLD_SIZE, single
process. mpirun inside a SLURM allocation therefore reports mpirun's ranks, and `python` run directly
in an sbatch script (SLURM_NTASKS set, but no srun step) is a single process, not rank 0 of SLURM_NTASKS.

Whether MPI_Init can join the launch (`mpi_wireup`) is read apart from who the launcher is: srun
--mpi=pmix sets PMIX_RANK and srun --mpi=pmi2 PMI_RANK, but srun --mpi=none sets neither, and there
MPI_Init would make every task a world of its own (pycomm.backends picks gloo instead).

MASTER_ADDR/MASTER_PORT locate a TCP rendezvous (gloo, NCCL without MPI). Inside a SLURM job they
default to the job's first node and port 29500 + SLURM_JOB_ID % 1000 (jobs sharing a node differ)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

SLURM_PORT_BASE = 29500


@dataclass(frozen=True)
class LaunchEnv:
    rank: int
    size: int
    local_rank: int
    local_size: int
    launcher: str  # "openmpi" | "mpich" | "torchrun" | "slurm" | "env" | "single"
    master_addr: Optional[str] = None  # for a TCP store: MASTER_ADDR, else SLURM's first node
    master_port: Optional[int] = None  # MASTER_PORT, else the SLURM job's default
    mpi_wireup: Optional[str] = None  # what MPI_Init can join: "openmpi", "pmi", "pmix"; None: nothing

    @property
    def mpi_launched(self) -> bool:
        """Started by a launcher that MPI_Init can join (mpirun, mpiexec, srun --mpi=pmix/pmi2)."""
        return self.mpi_wireup is not None or self.launcher in ("openmpi", "mpich")


def _int(env: Mapping[str, str], key: str) -> int:
    value = env[key]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {key}={value!r} is not an integer") from None


def _opt_int(env: Mapping[str, str], key: str, default: int) -> int:
    return _int(env, key) if env.get(key, "") != "" else default


def expand_tasks_per_node(spec: str) -> list[int]:
    """SLURM's task counts per node, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in filter(None, spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"cannot parse SLURM tasks-per-node {spec!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list, e.g. "nid[0007-0010,0020],gpu1" -> "nid0007"."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError(f"cannot parse SLURM node list {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + re.split(r"[-,]", ranges, maxsplit=1)[0]


def _port(env: Mapping[str, str]) -> Optional[int]:
    """MASTER_PORT, else SLURM_PORT_BASE + SLURM_JOB_ID % 1000 inside a SLURM job, else None."""
    if env.get("MASTER_PORT"):
        value = env["MASTER_PORT"]
        port = int(value) if value.strip().isdigit() else -1
        if not 1 <= port <= 65535:
            raise ValueError(
                f"environment variable MASTER_PORT={value!r} is not a port number: expected an "
                f"integer in [1, 65535] (the TCP port rank 0 serves the rendezvous on, e.g. 29500)"
            )
        return port
    if env.get("SLURM_JOB_ID"):
        return SLURM_PORT_BASE + _int(env, "SLURM_JOB_ID") % 1000
    return None


def _master(env: Mapping[str, str]) -> tuple[Optional[str], Optional[int]]:
    addr = env.get("MASTER_ADDR") or None
    if addr is None:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if nodes:
            addr = first_host(nodes)
    return addr, _port(env)


def _slurm_wireup(env: Mapping[str, str]) -> Optional[str]:
    """What srun's --mpi plugin gave MPI_Init: PMIx (--mpi=pmix), PMI-2 (--mpi=pmi2) or nothing (none)."""
    if "PMIX_RANK" in env:
        return "pmix"
    if "PMI_RANK" in env or "PMI_FD" in env:
        return "pmi"
    return None


def detect(environ: Optional[Mapping[str, str]] = None) -> LaunchEnv:
    """This process's place, from `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    addr, port = _master(env)

    def make(
        rank: int, size: int, local_rank: int, local_size: int, launcher: str, wireup: Optional[str] = None
    ) -> LaunchEnv:
        if not (0 <= rank < size):
            raise ValueError(f"{launcher} environment gives rank {rank} outside a world of size {size}")
        if not (0 <= local_rank < local_size):
            raise ValueError(f"{launcher} environment gives local rank {local_rank} outside {local_size} local ranks")
        return LaunchEnv(rank, size, local_rank, local_size, launcher, addr, port, wireup)

    if "OMPI_COMM_WORLD_RANK" in env:
        return make(
            _int(env, "OMPI_COMM_WORLD_RANK"),
            _int(env, "OMPI_COMM_WORLD_SIZE"),
            _opt_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0),
            _opt_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1),
            "openmpi",
            "openmpi",
        )
    if "PMI_RANK" in env and "PMI_SIZE" in env:
        return make(
            _int(env, "PMI_RANK"),
            _int(env, "PMI_SIZE"),
            _opt_int(env, "MPI_LOCALRANKID", 0),
            _opt_int(env, "MPI_LOCALNRANKS", 1),
            "mpich",
            "pmi",
        )
    if env.get("RANK") and env.get("WORLD_SIZE") and (env.get("LOCAL_RANK") or env.get("TORCHELASTIC_RUN_ID")):
        size = _int(env, "WORLD_SIZE")
        return make(
            _int(env, "RANK"), size, _opt_int(env, "LOCAL_RANK", 0), _opt_int(env, "LOCAL_WORLD_SIZE", size), "torchrun"
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:  # inside an srun step
        local_size = 1
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        if per_node:
            counts = expand_tasks_per_node(per_node)
            node = _opt_int(env, "SLURM_NODEID", 0)
            local_size = counts[node] if node < len(counts) else counts[-1]
        elif env.get("SLURM_NTASKS_PER_NODE"):
            local_size = _int(env, "SLURM_NTASKS_PER_NODE")
        return make(
            _int(env, "SLURM_PROCID"),
            _int(env, "SLURM_STEP_NUM_TASKS"),
            _opt_int(env, "SLURM_LOCALID", 0),
            local_size,
            "slurm",
            _slurm_wireup(env),
        )
    if env.get("RANK") or env.get("WORLD_SIZE"):  # torch's env:// convention, set by hand or by a script
        for key in ("RANK", "WORLD_SIZE"):
            if not env.get(key):
                other = "WORLD_SIZE" if key == "RANK" else "RANK"
                raise ValueError(
                    f"environment variable {other}={env[other]!r} is set but {key} is not: set both "
                    f"(this rank's number and the number of ranks), as torchrun does, or neither "
                    f"for a single process"
                )
        return make(_int(env, "RANK"), _int(env, "WORLD_SIZE"), 0, 1, "env")  # no LOCAL_RANK: torchrun's is above
    return LaunchEnv(0, 1, 0, 1, "single", addr, port)
