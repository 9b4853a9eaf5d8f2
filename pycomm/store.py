"""TCPStore: a key -> bytes store over TCP for bootstrapping ranks without MPI.

Rank 0 serves it at MASTER_ADDR:MASTER_PORT and every rank (rank 0 too) connects as a client; it
hands out the NCCL unique id under srun --mpi=none / torchrun, and serves any small rendezvous
(`--nproc N` launches, barriers before MPI exists). Waits are bounded: a missing peer raises
TimeoutError naming the address and what was awaited; a lost server raises ConnectionError."""
from __future__ import annotations

import os
from typing import Sequence

from pycomm._build import core

DEFAULT_TIMEOUT_S = 300.0


def default_timeout() -> float:
    """PYCOMM_TIMEOUT when set (the stall timeout also bounds rendezvous), else 300 s."""
    value = os.environ.get("PYCOMM_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        timeout = float(value)
    except ValueError:
        raise ValueError(f"PYCOMM_TIMEOUT={value!r}: expected a number of seconds") from None
    if timeout <= 0:
        raise ValueError(f"PYCOMM_TIMEOUT={value!r}: expected a positive number of seconds")
    return timeout


class TCPStore:
    """Connects to (and on the server rank, serves) the store at host:port.

    `is_server=True` on exactly one rank; it binds `host` (an address of that machine), and with
    port=0 picks a free port (read it back from `.port`). The server lives as long as this object:
    keep rank 0's store alive until the other ranks are done with it."""

    def __init__(self, host: str, port: int, world_size: int, is_server: bool,
                 timeout: float | None = None) -> None:
        if not isinstance(host, str):
            raise TypeError(f"host: expected a str, got {type(host).__name__}")
        for name, value in (("port", port), ("world_size", world_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
        self._store = core().TCPStore(host, port, world_size, bool(is_server),
                                      float(default_timeout() if timeout is None else timeout))

    @classmethod
    def from_env(cls, rank: int, world_size: int, timeout: float | None = None) -> TCPStore:
        """The store at MASTER_ADDR:MASTER_PORT (as torchrun sets them); rank 0 serves it."""
        addr = os.environ.get("MASTER_ADDR")
        port = os.environ.get("MASTER_PORT")
        if not addr or not port:
            raise RuntimeError("MASTER_ADDR and MASTER_PORT must be set to rendezvous without MPI "
                               f"(got MASTER_ADDR={addr!r}, MASTER_PORT={port!r}); e.g. MASTER_ADDR=<rank 0's "
                               "host name> MASTER_PORT=29500")
        try:
            port_number = int(port)
        except ValueError:
            raise ValueError(f"MASTER_PORT={port!r}: expected a port number") from None
        return cls(addr, port_number, world_size, is_server=rank == 0, timeout=timeout)

    def set(self, key: str, value: bytes | str) -> None:
        self._store.set(key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """Waits until `key` is set (at most `timeout`, default the store's) and returns its value."""
        return self._store.get(key, -1.0 if timeout is None else float(timeout))

    def add(self, key: str, delta: int) -> int:
        """Atomically adds `delta` to the integer counter at `key` (0 when unset); returns the sum."""
        return self._store.add(key, int(delta))

    def check(self, key: str) -> bool:
        return self._store.check(key)

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        if isinstance(keys, str):
            raise TypeError("keys: expected a sequence of str, got a single str")
        self._store.wait(list(keys), -1.0 if timeout is None else float(timeout))

    def barrier(self, timeout: float | None = None) -> None:
        """Returns once all world_size ranks have called barrier() as many times."""
        self._store.barrier(-1.0 if timeout is None else float(timeout))

    def close(self) -> None:
        """Disconnects; on the server rank, first waits (up to the timeout) for the other ranks to
        disconnect, then stops serving. Later calls raise ConnectionError."""
        self._store.close()

    @property
    def host(self) -> str:
        return self._store.host

    @property
    def port(self) -> int:
        return self._store.port

    @property
    def world_size(self) -> int:
        return self._store.world_size

    @property
    def timeout(self) -> float:
        return self._store.timeout

    def __repr__(self) -> str:
        return repr(self._store)
