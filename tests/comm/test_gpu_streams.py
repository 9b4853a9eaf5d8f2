"""Stream order on one GPU without NCCL: buffers of pycomm's pool (pycomm/_buffers.py) reused across streams
are not written on one before their last use on another has run, and the local backend's send to itself
copies on the caller's stream. On a GPU only (marked gpu)."""

from __future__ import annotations

import pytest
import torch

from pycomm._buffers import BufferPool
from pycomm._build import core
from pycomm.communicator import Communicator

HALF_SECOND = 1_000_000_000  # torch.cuda._sleep cycles at about 2 GHz

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


def test_a_buffer_reused_on_another_stream_waits_for_its_last_use():
    pool = BufferPool()
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        buf = pool.take(1 << 20, torch.float32, torch.device("cuda"))
        torch.cuda._sleep(HALF_SECOND)
        buf.fill_(1.0)  # its last use on `first`, half a second from now
        pool.give(buf)
    with torch.cuda.stream(second):
        again = pool.take(1 << 20, torch.float32, torch.device("cuda"))
        assert again.data_ptr() == buf.data_ptr()
        again.fill_(2.0)  # must run after `first`'s fill
    torch.cuda.synchronize()
    assert bool((again == 2.0).all()), "the buffer was written on the second stream before the first was done"


def test_a_buffer_reused_on_the_same_stream_needs_no_wait_and_keeps_its_order():
    pool = BufferPool()
    buf = pool.take(4096, torch.float32, torch.device("cuda"))
    buf.fill_(1.0)
    pool.give(buf)
    again = pool.take(100, torch.float32, torch.device("cuda"))
    again.add_(1.0)  # on the same stream: after the fill
    assert again.data_ptr() == buf.data_ptr() and again.tolist() == [2.0] * 100


def test_a_send_to_itself_on_the_local_backend_copies_on_the_callers_stream():
    """The send's copy must see a write queued on a side stream behind half a second of work (a copy on the
    legacy default stream would not wait for a non-blocking stream), and the receive's copy must come
    before what that stream runs next."""
    comm = Communicator(core().local_transport(), "local-gpu-test")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(HALF_SECOND)
        t.fill_(7.0)
        comm.send(t, 0, tag=3)
        r = torch.empty_like(t)
        comm.recv(r, 0, tag=3)
        doubled = r * 2
    side.synchronize()
    comm.shutdown()
    assert bool((doubled == 14.0).all()), doubled[:4]
