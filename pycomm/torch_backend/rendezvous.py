"""init_process_group's default env:// rendezvous, under a launcher that sets none of torch's variables.

torch's env:// needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; mpirun and srun set none of them. When
they are missing and mpirun or srun launched this process, pycomm starts its world (MPI under mpirun and
srun --mpi=pmix/pmi2, its gloo transport under srun --mpi=none), rank 0 serves a torch TCPStore on a free
port and broadcasts its address over that world, so `dist.init_process_group("pycomm")` works under both
unchanged. Everywhere else (torchrun, variables set by hand) torch's own handler runs as before."""

from __future__ import annotations

import importlib
import os
import socket
from datetime import timedelta
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import torch

from pycomm import launch_env, runtime

_ADDRESS_BYTES = 512
_TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_OWN_LAUNCHERS = ("openmpi", "mpich", "slurm")  # launchers whose ranks pycomm reads and torch's env:// does not


def _needs_world(url: str) -> bool:
    """Whether env:// must meet through pycomm's launched world: torch's variables are missing (and no rank
    is given in the URL) under a launcher pycomm can start its world from."""
    query = urlparse(url).query
    launch = launch_env.detect()
    return (
        (launch.mpi_launched or launch.launcher in _OWN_LAUNCHERS)
        and "rank=" not in query
        and any(not os.environ.get(v) for v in _TORCH_VARIABLES)
    )


def _world_store(timeout: timedelta) -> Iterator[tuple[Any, int, int]]:
    from torch.distributed import TCPStore

    world = runtime.init()
    address = torch.zeros(_ADDRESS_BYTES, dtype=torch.uint8)
    server = None
    if world.rank == 0:
        server = TCPStore(socket.gethostname(), 0, world.size, is_master=True, timeout=timeout, wait_for_workers=False)
        text = f"{socket.gethostname()}:{server.port}".encode()
        address[: len(text)] = torch.tensor(list(text), dtype=torch.uint8)
    world.broadcast(address, 0)
    host, port = bytes(address[address > 0].tolist()).decode().rsplit(":", 1)
    store = server if server is not None else TCPStore(host, int(port), world.size, is_master=False, timeout=timeout)
    yield store, world.rank, world.size
    raise RuntimeError("pycomm's launcher rendezvous does not restart (no elastic membership under mpirun or srun)")


def install() -> None:
    """Routes env:// through pycomm's world where torch's variables are missing under mpirun or srun."""
    # the module (torch.distributed.rendezvous as an attribute is its function of that name)
    module = importlib.import_module("torch.distributed.rendezvous")
    handlers: dict[str, Callable[..., Iterator[Any]]] = module._rendezvous_handlers
    torch_env = handlers.get("env")
    if torch_env is None or getattr(torch_env, "_pycomm", False):
        return

    def env_or_world(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs: Any) -> Iterator[Any]:
        if _needs_world(url):
            return _world_store(timeout)
        return torch_env(url, timeout=timeout, **kwargs)

    env_or_world._pycomm = True  # type: ignore[attr-defined]
    handlers["env"] = env_or_world
