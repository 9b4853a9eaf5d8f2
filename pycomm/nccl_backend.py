"""The "nccl" backend of pycomm.init() (RCCL on ROCm builds), registered with pycomm.backends.

The world communicator is an NCCL communicator on GPU local_rank % (visible GPUs); that GPU becomes
torch's current device. Its unique id is made by rank 0 and handed to the others over MPI when the
ranks were started by an MPI launcher (or MPI is already initialised), else over a TCP store at
MASTER_ADDR:MASTER_PORT (srun --mpi=none; under torchrun, the store its agent serves there)."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from pycomm import backends
from pycomm._build import build_info, core
from pycomm.errors import PycommError
from pycomm.launch_env import LaunchEnv
from pycomm.store import TCPStore, default_timeout

NO_NCCL = "this build of pycomm has no NCCL; rebuild with NCCL_HOME or pip install nvidia-nccl-cu13"
NO_RCCL = "this build of pycomm has no RCCL; rebuild with RCCL_HOME (or ROCM_PATH) pointing at ROCm's RCCL"
STORE_KEY = "pycomm/nccl/world/unique_id"
TORCH_STORE_MAX_S = 1e9  # ~30 years: PYCOMM_TIMEOUT=0 (no timeout) on torchrun's agent store


def unavailable_reason() -> str:
    """ "" when this build and machine can run NCCL, else why not."""
    info = build_info()
    if not info["nccl"]:
        return NO_RCCL if info["hip"] else NO_NCCL
    if not torch.cuda.is_available():
        return "no GPU is visible to torch (torch.cuda.is_available() is False); the NCCL backend needs one"
    return ""


def device_for(env: LaunchEnv) -> int:
    """The GPU of this rank: its local rank modulo the GPUs this process sees."""
    count = torch.cuda.device_count()
    if count < 1:
        raise PycommError("backend 'nccl': this process sees no GPU")
    return env.local_rank % count


def _mpi_usable(env: LaunchEnv) -> bool:
    if not build_info()["mpi"]:
        return False
    if env.mpi_launched:
        return True
    # The application initialised MPI itself (mpi4py), over the same ranks (not a singleton MPI).
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() == env.size


def _share_over_mpi(env: LaunchEnv, data: bytes | None, nbytes: int) -> bytes:
    from pycomm.communicator import Communicator  # a plain host broadcast on the MPI world

    mpi = Communicator(backends.get("mpi").create_world(env), "nccl-bootstrap")
    try:
        buf = torch.zeros(nbytes, dtype=torch.uint8)
        if data is not None:
            buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        mpi.broadcast(buf, root=0)
        return buf.numpy().tobytes()
    finally:
        mpi.shutdown()


def _share_over_agent_store(env: LaunchEnv, data: bytes | None, key: str) -> bytes:
    """torchrun's agent already serves a store at MASTER_ADDR:MASTER_PORT: be its client."""
    import datetime

    from torch.distributed import TCPStore as TorchStore

    key = f"{key}/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    seconds = min(default_timeout(), TORCH_STORE_MAX_S)  # torch's store has no "no timeout" (inf overflows)
    store = TorchStore(
        env.master_addr, env.master_port, env.size, is_master=False, timeout=datetime.timedelta(seconds=seconds)
    )
    if data is not None:
        store.set(key, data)
    return store.get(key)


def _share_over_tcp_store(env: LaunchEnv, data: bytes | None, key: str) -> bytes:
    store = TCPStore(env.master_addr, env.master_port, env.size, is_server=env.rank == 0)
    try:
        if data is not None:
            store.set(key, data)
        data = store.get(key)
        store.barrier()  # every rank is alive before the (blocking) NCCL init starts
        return data
    finally:
        store.close()  # rank 0 waits here until the others have hung up


def share_from_rank0(env: LaunchEnv, data: bytes | None, nbytes: int, key: str = STORE_KEY) -> bytes:
    """Rank 0's `data` (nbytes long; None elsewhere) on every rank: over MPI when the ranks run
    under an MPI launcher (or the application's MPI), else over a TCP store at MASTER_ADDR:MASTER_PORT
    (torchrun's own agent store when torchrun serves one there)."""
    if env.launcher == "single":
        assert data is not None
        return data
    if _mpi_usable(env):
        return _share_over_mpi(env, data, nbytes)
    if not env.master_addr or not env.master_port:
        raise PycommError(
            f"backend 'nccl' under {env.launcher} (rank {env.rank} of {env.size}) exchanges the NCCL id "
            f"over a TCP store: set MASTER_ADDR (rank 0's host) and MASTER_PORT (a free port, e.g. 29500) "
            f"on every rank; got MASTER_ADDR={env.master_addr!r}, MASTER_PORT={env.master_port!r}"
        )
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        return _share_over_agent_store(env, data, key)
    return _share_over_tcp_store(env, data, key)


def unique_id(env: LaunchEnv) -> bytes:
    """Rank 0's new NCCL unique id, on every rank."""
    uid = core().nccl_unique_id() if env.rank == 0 else None
    return share_from_rank0(env, uid, core().nccl_unique_id_bytes)


def create_world(env: LaunchEnv) -> Any:
    device = device_for(env)
    torch.cuda.set_device(device)
    return core().nccl_world(unique_id(env), env.rank, env.size, device)


# Not preferred by backend="auto": a visible GPU does not mean the tensors are on it, nor one GPU
# per rank (several NCCL ranks on one GPU hang); GPU training asks for backend="nccl".
backends.register(backends.Backend("nccl", unavailable_reason, create_world))
