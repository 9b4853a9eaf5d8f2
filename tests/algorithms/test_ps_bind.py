"""Where a rank of a fault-tolerant run listens when an MPI launcher started it (no PYCOMM_PS_RANK: the
addresses and the secret are exchanged over the job's communicator): on the job's interface, never on
every interface (0.0.0.0); PYCOMM_PS_HOST chooses it, and a PYCOMM_PS_SECRET given is the run's secret."""

from __future__ import annotations

import pytest
import zmq

from algorithms.ps import layout, wire


@pytest.fixture
def comm(monkeypatch):
    """A real pycomm communicator, as under a plain mpirun with every rank on this machine."""
    import pycomm

    for name in (
        layout.RANK_ENV,
        layout.WORLD_ENV,
        layout.ADDRESS_ENV,
        layout.ADDRESSES_ENV,
        layout.SECRET_ENV,
        layout.HOST_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    return pycomm.world() if pycomm.is_initialized() else pycomm.init(backend="local")


def bound(comm) -> tuple[layout.Layout, str]:
    """The layout, and the endpoint the rank's ROUTER is bound to (as ZeroMQ reports it)."""
    ctx = zmq.Context()
    try:
        found, sock = layout.resolve(comm, ctx, listen=True)
        return found, sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    finally:
        ctx.destroy(linger=0)


def test_every_rank_on_this_host_listens_on_loopback_not_every_interface(comm):
    found, endpoint = bound(comm)
    assert endpoint.startswith("tcp://127.0.0.1:"), endpoint
    assert found.addresses[comm.rank] == endpoint.removeprefix("tcp://")
    assert len(found.secret) >= 32 and found.secret not in repr(found)  # made by rank 0, never printed


def test_pycomm_ps_host_chooses_the_interface_and_a_given_secret_is_used(comm, monkeypatch):
    host = wire.host_address()
    monkeypatch.setenv(layout.HOST_ENV, host)
    monkeypatch.setenv(layout.SECRET_ENV, "k" * 40)
    found, endpoint = bound(comm)
    assert endpoint.startswith(f"tcp://{host}:") and not endpoint.startswith("tcp://0.0.0.0"), endpoint
    assert found.secret == "k" * 40
