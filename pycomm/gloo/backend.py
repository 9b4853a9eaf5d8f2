"""The "gloo" backend of pycomm.init(), registered with pycomm.backends: CPU ranks connected by
torch.distributed's gloo (pycomm/gloo/transport.py), for launches MPI cannot join (torchrun,
srun --mpi=none, RANK/WORLD_SIZE by hand). backend="auto" picks it there.

Ranks meet through a torch TCPStore at MASTER_ADDR:MASTER_PORT (pycomm.launch_env: inside a SLURM
job they default to the first node and a port from the job id): rank 0 serves it, or, under torchrun,
every rank is a client of the store torchrun's agent already serves there. Gloo then opens a TCP
connection between every pair of ranks on the interface GLOO_SOCKET_IFNAME names (default: the
address this host's name resolves to), as torch.distributed does."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

import torch

from pycomm import backends
from pycomm.errors import PycommError
from pycomm.launch_env import LaunchEnv
from pycomm.peer_hosts import host_id
from pycomm.store import default_timeout

WORLD_PREFIX = "pycomm/gloo/world"


def unavailable_reason() -> str:
    """ "" when torch.distributed has gloo here, else why not."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return (
            f"this torch ({torch.__version__}) was built without torch.distributed's gloo; install a torch "
            f"wheel from pytorch.org, or launch with mpirun / srun --mpi=pmix to use MPI"
        )
    return ""


@lru_cache(maxsize=None)
def device() -> Any:
    """The network device gloo uses: GLOO_SOCKET_IFNAME's interface, else this host's name's address."""
    from torch.distributed import ProcessGroupGloo

    interface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    try:
        if interface:
            return ProcessGroupGloo.create_device(interface=interface)
        return ProcessGroupGloo.create_default_device()
    except RuntimeError as e:
        raise PycommError(
            f"backend 'gloo': no network device for gloo ({e}); set GLOO_SOCKET_IFNAME to the "
            f"interface the ranks reach each other on (e.g. eth0, hsn0, lo for one node)"
        ) from e


def rendezvous_store(env: LaunchEnv, timeout_s: float) -> Any:
    """The torch store every rank of this launch reaches at MASTER_ADDR:MASTER_PORT."""
    from torch.distributed import PrefixStore, TCPStore

    from pycomm.gloo.transport import timedelta as bounded  # PYCOMM_TIMEOUT=0 makes timeout_s inf

    if not env.master_addr or env.master_port is None:
        raise PycommError(
            f"backend 'gloo' under {env.launcher} (rank {env.rank} of {env.size}) meets the other ranks "
            f"over TCP: set MASTER_ADDR (rank 0's host) and MASTER_PORT (a free port, e.g. 29500) on "
            f"every rank; got MASTER_ADDR={env.master_addr!r}, MASTER_PORT={env.master_port!r}"
        )
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    try:
        store = TCPStore(
            env.master_addr,
            env.master_port,
            env.size,
            is_master=env.rank == 0 and not agent,
            timeout=bounded(timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as e:  # torch's DistNetworkError and DistStoreError are RuntimeErrors
        role = "serve" if env.rank == 0 and not agent else "reach"
        raise PycommError(
            f"backend 'gloo': rank {env.rank} could not {role} the rendezvous at "
            f"MASTER_ADDR:MASTER_PORT = {env.master_addr}:{env.master_port} within {timeout_s:g} s "
            f"({e}); is rank 0 running, the port free and the address reachable?"
        ) from e
    if agent:  # a restarted torchrun job must not meet the keys of its previous attempt
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return PrefixStore(f"pycomm/{run}", store)
    return store


def create_world(env: LaunchEnv) -> Any:
    return transport_over(rendezvous_store(env, default_timeout()), env.rank, env.size, WORLD_PREFIX)


def transport_over(store: Any, rank: int, size: int, prefix: str) -> Any:
    """A gloo transport of `size` ranks meeting through torch store `store` under key prefix `prefix`
    (the world's, or a torch.distributed group's own store: pycomm.torch_backend)."""
    from torch._C._distributed_c10d import AllgatherOptions
    from torch.distributed import PrefixStore

    from pycomm._build import core
    from pycomm.gloo.transport import GlooTransport, process_group

    stall_s = core().stall_timeout()
    pg = process_group(PrefixStore(prefix, store), rank, size, stall_s, device())
    hosts = torch.empty(size, dtype=torch.int64)
    pg._allgather_base(hosts, torch.tensor([host_id()], dtype=torch.int64), AllgatherOptions()).wait()
    return GlooTransport(store, pg, rank, size, hosts.tolist(), prefix, stall_s, device())


backends.register(backends.Backend("gloo", unavailable_reason, create_world))
