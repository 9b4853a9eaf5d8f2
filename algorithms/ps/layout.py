"""Who is who in a fault-tolerant run: this process's rank, the world size and every rank's address.

Two ways to learn it:
- started as independent processes (apps' launch for these algorithms, or `python -m apps.ps server|worker`):
  the environment says it (read here and nowhere else):
      PYCOMM_PS_RANK       this process's rank (servers first: ranks 0 .. servers-1)
      PYCOMM_PS_WORLD      the number of processes
      PYCOMM_PS_ADDRESS    HOST:PORT of rank 0; rank r listens on PORT + r
      PYCOMM_PS_ADDRESSES  or: HOST:PORT of every rank, comma-separated (several machines)
      PYCOMM_PS_SECRET     the run's secret (auth.py), the same in every process
  No MPI is involved, so a process's death ends no other.
- under an MPI launcher with a pycomm communicator: each rank listens on a free port of the interface the
  job uses (PYCOMM_PS_HOST; else loopback when every rank is on this host, else this host's address; never
  every interface), rank 0's secret (PYCOMM_PS_SECRET, or a fresh one) and the addresses are exchanged once
  with the communicator (all-gathers); afterwards the communicator is not used.
The secret never travels on a command line, where any user of the machine could read it (ps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from algorithms.ps import auth, wire
from algorithms.ps.ps_settings import ADDRESS_ENV, ADDRESSES_ENV, HOST_ENV, RANK_ENV, SECRET_ENV, WORLD_ENV
from algorithms.ps.wire import zmq
from pycomm import settings

_ADDRESS_BYTES = 128


@dataclass(frozen=True)
class Layout:
    rank: int
    world: int
    addresses: tuple[str, ...]  # per rank ("" where a rank listens nowhere)
    independent: bool  # started as independent processes (no MPI job)
    secret: str = ""  # the run's: every message is signed with it (auth.py)

    def __repr__(self) -> str:  # never the secret, in a log or a traceback
        return (
            f"Layout(rank={self.rank}, world={self.world}, addresses={self.addresses}, independent={self.independent})"
        )


def from_env(env: Mapping[str, str] | None = None) -> Layout | None:
    """The layout the environment gives, None when this process was not started that way."""
    env = os.environ if env is None else env
    rank, world = settings.get(RANK_ENV, env), settings.get(WORLD_ENV, env)  # each checked there
    if rank is None:
        return None
    if world is None:
        raise ValueError(f"{RANK_ENV}={rank} is set but {WORLD_ENV} (the number of processes) is not")
    if not 0 <= rank < world:
        raise ValueError(f"{RANK_ENV}={rank} is outside a world of {WORLD_ENV}={world} processes")
    if settings.get(ADDRESSES_ENV, env):
        addresses = settings.get(ADDRESSES_ENV, env)
        if len(addresses) != world:
            raise ValueError(f"{ADDRESSES_ENV} lists {len(addresses)} addresses for {world} processes")
        for a in addresses:
            wire.split_address(a)
    elif settings.get(ADDRESS_ENV, env):
        host, port = wire.split_address(settings.get(ADDRESS_ENV, env))
        addresses = tuple(f"{host}:{port + r}" for r in range(world))
    else:
        raise ValueError(f"{RANK_ENV} is set but neither {ADDRESS_ENV} (HOST:PORT of rank 0) nor {ADDRESSES_ENV}")
    secret = settings.get(SECRET_ENV, env)
    if secret is None:
        raise ValueError(
            f"{RANK_ENV} is set but {SECRET_ENV} is not: give every process of the run the same "
            "secret in its environment (e.g. export it from `python -c 'import secrets; "
            "print(secrets.token_hex(32))'`), never on a command line"
        )
    return Layout(rank, world, addresses, True, secret)


def resolve(comm: Any, ctx: zmq.Context, listen: bool) -> tuple[Layout, zmq.Socket | None]:
    """This process's layout and, when `listen`, its bound ROUTER socket."""
    layout = from_env()
    if layout is not None:
        sock = wire.router(ctx, layout.rank, layout.secret, layout.addresses[layout.rank])[0] if listen else None
        return layout, sock
    if comm is None:
        import pycomm

        comm = pycomm.world() if pycomm.is_initialized() else pycomm.init()
    given = settings.get(SECRET_ENV)  # read (and checked) on every rank, so a malformed one fails them all alike
    secret = _allgather(comm, given or auth.new_secret() if comm.rank == 0 else "")[0]
    host = listen_host(comm)  # a collective: every rank takes part, listening or not
    sock, address = wire.router(ctx, comm.rank, secret, host=host) if listen else (None, "")
    return Layout(comm.rank, comm.size, _allgather(comm, address if listen else ""), False, secret), sock


def listen_host(comm: Any) -> str:
    """The interface this rank listens on under an MPI launcher: PYCOMM_PS_HOST, else loopback when every
    rank runs on this machine, else this machine's address (never every interface: 0.0.0.0)."""
    import socket

    chosen = settings.get(HOST_ENV)
    hosts = set(_allgather(comm, socket.gethostname()))
    return chosen or ("127.0.0.1" if len(hosts) == 1 else wire.host_address())


def _allgather(comm: Any, text: str) -> tuple[str, ...]:
    """Every rank's `text` (at most _ADDRESS_BYTES bytes), in rank order."""
    raw = text.encode()
    if len(raw) > _ADDRESS_BYTES:
        raise ValueError(f"{text[:20]!r}...: at most {_ADDRESS_BYTES} bytes travel in the address exchange")
    mine = torch.zeros(_ADDRESS_BYTES, dtype=torch.uint8)
    mine[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    out = torch.zeros(comm.size * _ADDRESS_BYTES, dtype=torch.uint8)
    comm.allgather(out, mine)
    return tuple(bytes(row.tolist()).rstrip(b"\0").decode() for row in out.view(comm.size, _ADDRESS_BYTES))


def env_for(rank: int, world: int, address: str, secret: str) -> dict[str, str]:
    """The environment that starts process `rank` of an independent launch (rank 0 at `address`; `secret`:
    the run's, auth.new_secret() once per launch)."""
    wire.split_address(address)
    return {RANK_ENV: str(rank), WORLD_ENV: str(world), ADDRESS_ENV: address, SECRET_ENV: secret}


def _ephemeral_low(default: int = 32768) -> int:
    """The lowest port the kernel hands out as a connection's source port."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_base_port(n: int, host: str = "127.0.0.1") -> int:
    """A port P such that P .. P + n - 1 are free on this machine now (rank r will listen on P + r).
    Taken below the kernel's ephemeral range where it can: a ZeroMQ socket retrying its connect to a rank
    not listening yet takes a new ephemeral source port each time, and one equal to the destination
    connects the socket to itself, after which that rank's bind fails."""
    import random
    import socket

    low = _ephemeral_low()
    top = low - n if low - n >= 20000 + 1000 else 60000 - n
    for _ in range(200):
        base = random.randint(20000, top)
        socks = []
        try:
            for r in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind((host, base + r))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"found no {n} consecutive free ports on {host}")
