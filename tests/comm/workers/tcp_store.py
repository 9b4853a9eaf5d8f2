"""One rank of the TCP store tests: `python -m tests.comm.workers.tcp_store SCENARIO RANK WORLD PORT`.

Started as plain processes by tests/comm/test_tcp_store.py (no MPI); asserts and exits non-zero on
failure."""

from __future__ import annotations

import sys
import time

from pycomm import TCPStore

HOST = "127.0.0.1"


def exchange(rank: int, world: int, port: int) -> None:
    store = TCPStore(HOST, port, world, is_server=rank == 0, timeout=60)
    store.set(f"rank/{rank}", bytes([rank]) * (rank + 1))
    store.wait([f"rank/{r}" for r in range(world)])
    for r in range(world):
        assert store.get(f"rank/{r}") == bytes([r]) * (r + 1), f"rank {rank}: bad value for rank/{r}"
    store.add("counter", rank + 1)
    store.barrier()
    assert store.add("counter", 0) == world * (world + 1) // 2
    if rank == 0:  # a value much larger than a socket buffer, as an NCCL id list might be
        store.set("big", bytes(range(256)) * 4096)
    assert store.get("big") == bytes(range(256)) * 4096
    for _ in range(5):  # repeated barriers stay in step; rank 0 leaves first and its server
        store.barrier()  # must still answer the others' last requests (it lingers until they hang up)


def missing_peer(rank: int, world: int, port: int) -> None:
    """Started with one rank fewer than `world`: the barrier must time out, naming the address."""
    store = TCPStore(HOST, port, world, is_server=rank == 0, timeout=60)
    store.set(f"up/{rank}", b"1")  # the ranks that came meet first: a slow start is not the missing rank
    store.wait([f"up/{r}" for r in range(world - 1)])
    start = time.monotonic()
    try:
        store.barrier(timeout=1.5)
    except TimeoutError as e:
        msg = str(e)
        assert f"{HOST}:{port}" in msg and f"{world - 1} of {world} ranks arrived" in msg, msg
        assert time.monotonic() - start < 30, "the timeout took far longer than asked"
    else:
        raise AssertionError("barrier returned although a rank never came")


def main() -> None:
    scenario, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    {"exchange": exchange, "missing_peer": missing_peer}[scenario](rank, world, port)
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
