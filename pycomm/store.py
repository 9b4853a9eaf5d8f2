"""TCPStore: a key -> bytes store over TCP for bootstrapping ranks without MPI.

Rank 0 serves it at MASTER_ADDR:MASTER_PORT and every rank (rank 0 too) connects as a client; it
hands out the NCCL unique id under srun --mpi=none / torchrun, and serves any small rendezvous
(`--nproc N` launches, barriers before MPI exists). Waits are bounded: a missing peer raises
TimeoutError naming the address and what was awaited; a lost server raises ConnectionError."""

from __future__ import annotations

import math
import os
from typing import Sequence

from pycomm import settings
from pycomm._build import core
from pycomm._validate import check_bool, check_int, check_str, check_timeout


def default_timeout() -> float:
    """PYCOMM_TIMEOUT (the stall timeout also bounds rendezvous) in seconds; its 0 (no timeout) is inf."""
    seconds: float = settings.get("PYCOMM_TIMEOUT")
    return math.inf if seconds == 0 else seconds


class TCPStore:
    """Connects to (and on the server rank, serves) the store at host:port.

    `is_server=True` on exactly one rank; it binds `host` (an address of that machine), and with
    port=0 picks a free port (read it back from `.port`). The server lives as long as this object:
    keep rank 0's store alive until the other ranks are done with it. timeout: seconds > 0 bounding
    every wait (inf: none), default PYCOMM_TIMEOUT (300; its 0 means inf); a call's own timeout may be 0 (no wait).
    Bad arguments raise TypeError/ValueError naming them before anything is sent."""

    def __init__(self, host: str, port: int, world_size: int, is_server: bool, timeout: float | None = None) -> None:
        check_str(host, "TCPStore: host")
        port = check_int(port, "TCPStore: port", min_value=0, max_value=65535)
        world_size = check_int(world_size, "TCPStore: world_size", min_value=1, max_value=(1 << 31) - 1)
        is_server = check_bool(is_server, "TCPStore: is_server")
        timeout = check_timeout(timeout, "TCPStore: timeout", allow_zero=False)
        self._store = core().TCPStore(
            host, port, world_size, is_server, default_timeout() if timeout is None else timeout
        )

    @classmethod
    def from_env(cls, rank: int, world_size: int, timeout: float | None = None) -> TCPStore:
        """The store at MASTER_ADDR:MASTER_PORT (as torchrun sets them); rank 0 serves it."""
        rank = check_int(rank, "TCPStore.from_env: rank", min_value=0)
        addr = os.environ.get("MASTER_ADDR")
        port = os.environ.get("MASTER_PORT")
        if not addr or not port:
            raise RuntimeError(
                "MASTER_ADDR and MASTER_PORT must be set to rendezvous without MPI "
                f"(got MASTER_ADDR={addr!r}, MASTER_PORT={port!r}); e.g. MASTER_ADDR=<rank 0's "
                "host name> MASTER_PORT=29500"
            )
        try:
            port_number = int(port)
        except ValueError:
            raise ValueError(f"MASTER_PORT={port!r}: expected a port number") from None
        return cls(addr, port_number, world_size, is_server=rank == 0, timeout=timeout)

    def set(self, key: str, value: bytes | str) -> None:
        """Sets `key` to `value`: bytes (or bytearray / memoryview) as they are, a str UTF-8 encoded."""
        check_str(key, "TCPStore.set: key")
        if isinstance(value, str):
            value = value.encode()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value)
        else:  # bytes(5) would be five zero bytes, bytes([1, 2]) a guess at an encoding
            raise TypeError(
                f"TCPStore.set: value must be bytes or str, got {type(value).__name__} {value!r} "
                f"(encode numbers yourself, e.g. str(n) or n.to_bytes(8, 'little'))"
            )
        self._store.set(key, value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """Waits until `key` is set (at most `timeout` seconds, None: the store's; 0: only if already
        set) and returns its value."""
        check_str(key, "TCPStore.get: key")
        return self._store.get(key, _seconds(timeout, "TCPStore.get"))

    def add(self, key: str, delta: int) -> int:
        """Atomically adds `delta` to the integer counter at `key` (0 when unset); returns the sum.
        A key holding bytes from set(), or a sum past 64 bits, raises ValueError (the store stays usable)."""
        check_str(key, "TCPStore.add: key")
        return self._store.add(key, check_int(delta, "TCPStore.add: delta", min_value=-(1 << 63)))

    def check(self, key: str) -> bool:
        """Whether `key` is set (does not wait)."""
        return self._store.check(check_str(key, "TCPStore.check: key"))

    def wait(self, keys: Sequence[str], timeout: float | None = None) -> None:
        """Waits until every key of `keys` is set, within one `timeout` for all of them."""
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise TypeError(f"TCPStore.wait: keys must be a list of str, got {type(keys).__name__} {keys!r}")
        keys = [check_str(k, f"TCPStore.wait: keys[{i}]") for i, k in enumerate(keys)]
        self._store.wait(keys, _seconds(timeout, "TCPStore.wait"))

    def barrier(self, timeout: float | None = None) -> None:
        """Returns once all world_size ranks have called barrier() as many times."""
        self._store.barrier(_seconds(timeout, "TCPStore.barrier"))

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


def _seconds(timeout: object, what: str) -> float:
    """A wait's timeout for the core: seconds >= 0, or -1 for the store's own timeout (None)."""
    seconds = check_timeout(timeout, f"{what}: timeout", allow_zero=True)
    return -1.0 if seconds is None else seconds
