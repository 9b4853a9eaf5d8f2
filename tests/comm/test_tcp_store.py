"""The TCP store with real processes on 127.0.0.1 (no MPI): key exchange, counters, barriers,
timeouts naming the address, and bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from pycomm import TCPStore
from tests.launch import ROOT, worker_env

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def run_ranks(scenario: str, ranks: range, world: int, timeout: float = 120) -> None:
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.comm.workers.tcp_store", scenario, str(r), str(world), str(port)],
            cwd=ROOT,
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in ranks
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [(r, p.returncode, out) for r, p, out in zip(ranks, procs, outputs) if p.returncode != 0]
    assert not failed, "\n".join(f"--- rank {r} exited {rc} ---\n{out}" for r, rc, out in failed)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_exchange_and_barriers_across_processes(world):
    run_ranks("exchange", range(world), world)


def test_barrier_times_out_when_a_peer_never_comes():
    run_ranks("missing_peer", range(2), world=3)


def test_client_without_server_times_out_naming_the_address():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"{HOST}:{port}.*MASTER_ADDR"):
        TCPStore(HOST, port, 2, is_server=False, timeout=0.5)
    assert time.monotonic() - start < 30


def test_get_of_a_key_never_set_times_out():
    store = TCPStore(HOST, 0, 1, is_server=True, timeout=30)
    with pytest.raises(TimeoutError, match=r"waiting for key 'never'"):
        store.get("never", timeout=0.2)
    store.set("k", "v")  # the connection is still usable after a timed-out get
    assert store.get("k") == b"v"
    assert store.check("k") and not store.check("never")


def test_single_process_store_roundtrip():
    store = TCPStore(HOST, 0, 1, is_server=True, timeout=30)
    assert store.port > 0 and store.world_size == 1
    store.set("bin", b"\x00\xffab\x00")
    assert store.get("bin") == b"\x00\xffab\x00"
    assert store.add("n", 5) == 5 and store.add("n", -7) == -2
    store.barrier()
    store.barrier()
    store.wait(["bin", "n"])


def test_second_server_on_a_busy_port_fails_clearly():
    store = TCPStore(HOST, 0, 1, is_server=True, timeout=30)
    with pytest.raises(ConnectionError, match=rf"cannot listen on {HOST}:{store.port}"):
        TCPStore(HOST, store.port, 1, is_server=True, timeout=30)


def test_a_garbage_client_does_not_break_the_server():
    store = TCPStore(HOST, 0, 2, is_server=True, timeout=30)
    with socket.create_connection((HOST, store.port)) as raw:
        raw.sendall(b"GET / HTTP/1.0\r\n\r\n")
        try:  # the server hangs up on it (a reset, as the rest of the request was never read)
            reply = raw.recv(16)
        except ConnectionResetError:
            reply = b""
        assert reply == b""
    other = TCPStore(HOST, store.port, 2, is_server=False, timeout=30)
    other.set("x", b"1")
    assert store.get("x") == b"1"
    del other  # the server waits for its clients to hang up before it stops


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(host="", port=1, world_size=1, is_server=False), ValueError, "host"),
        (dict(host=HOST, port=70000, world_size=1, is_server=False), ValueError, "port"),
        (dict(host=HOST, port=0, world_size=1, is_server=False), ValueError, "port"),
        (dict(host=HOST, port=1, world_size=0, is_server=False), ValueError, "world_size"),
        (dict(host=HOST, port="29500", world_size=1, is_server=False), TypeError, "port"),
        (dict(host=HOST, port=1, world_size=1, is_server=False, timeout=0), ValueError, "timeout"),
    ],
)
def test_bad_arguments(kwargs, error, text):
    with pytest.raises(error, match=text):
        TCPStore(**kwargs)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda s: s.set("k", 5), TypeError, "value must be bytes or str, got int"),  # not five zero bytes
        (lambda s: s.set(5, b"v"), TypeError, "key must be a str"),
        (lambda s: s.barrier(timeout=-1), ValueError, "barrier: timeout must be >= 0"),
        (lambda s: s.get("k", timeout=float("nan")), ValueError, "get: timeout must be a number"),
        (lambda s: s.add("n", 2**63), ValueError, "add: delta must be an int in"),
        (lambda s: s.add("n", 1.5), TypeError, "add: delta must be an int"),
        (lambda s: s.wait(["k", 1]), TypeError, r"keys\[1\] must be a str"),
    ],
)
def test_bad_call_arguments(call, error, text):
    store = TCPStore(HOST, 0, 1, is_server=True, timeout=30)
    with pytest.raises(error, match=text):
        call(store)
    store.set("k", b"v")
    assert store.get("k") == b"v"


def test_a_refused_add_keeps_the_connection():
    """ADD on a key holding bytes, or past 64 bits, is refused with ValueError; the server answers
    instead of dropping the client, so the same store keeps working."""
    server = TCPStore(HOST, 0, 2, is_server=True, timeout=30)
    client = TCPStore(HOST, server.port, 2, is_server=False, timeout=30)
    client.set("text", b"abc")
    with pytest.raises(ValueError, match=r"add\('text'\): the key holds a value of 3 bytes"):
        client.add("text", 1)
    assert client.add("n", 2**63 - 1) == 2**63 - 1
    with pytest.raises(ValueError, match="overflows a 64-bit counter"):
        client.add("n", 1)
    assert client.add("n", -1) == 2**63 - 2  # the refused add changed nothing
    assert client.get("text") == b"abc" and server.get("text") == b"abc"
    client.close()


def test_from_env_needs_master_addr_and_port(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        TCPStore.from_env(rank=1, world_size=2)
    monkeypatch.setenv("MASTER_ADDR", HOST)
    monkeypatch.setenv("MASTER_PORT", "abc")
    with pytest.raises(ValueError, match="MASTER_PORT"):
        TCPStore.from_env(rank=1, world_size=2)


def test_from_env_serves_on_rank_0(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", HOST)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    server = TCPStore.from_env(rank=0, world_size=2, timeout=30)
    client = TCPStore.from_env(rank=1, world_size=2, timeout=30)
    client.set("hello", "world")
    assert server.get("hello") == b"world"
    del client


def test_server_serves_until_its_clients_hang_up():
    server = TCPStore(HOST, 0, 2, is_server=True, timeout=30)
    client = TCPStore(HOST, server.port, 2, is_server=False, timeout=30)
    server.set("k", b"v")
    closing = threading.Thread(target=server.close)
    closing.start()
    time.sleep(0.3)
    assert closing.is_alive(), "the server stopped while a client was still connected"
    assert client.get("k") == b"v"
    client.close()
    closing.join(timeout=25)
    assert not closing.is_alive()
    with pytest.raises(ConnectionError, match="closed"):
        server.get("k")
