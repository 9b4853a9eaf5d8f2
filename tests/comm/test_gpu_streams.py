"""GPU buffers of pycomm's pool (pycomm/_buffers.py) reused across streams: a buffer given back on one stream
is not written on another before its last use there has run. On a GPU only (marked gpu)."""
from __future__ import annotations

import pytest
import torch

from pycomm._buffers import BufferPool

HALF_SECOND = 1_000_000_000   # torch.cuda._sleep cycles at about 2 GHz

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


def test_a_buffer_reused_on_another_stream_waits_for_its_last_use():
    pool = BufferPool()
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        buf = pool.take(1 << 20, torch.float32, torch.device("cuda"))
        torch.cuda._sleep(HALF_SECOND)
        buf.fill_(1.0)             # its last use on `first`, half a second from now
        pool.give(buf)
    with torch.cuda.stream(second):
        again = pool.take(1 << 20, torch.float32, torch.device("cuda"))
        assert again.data_ptr() == buf.data_ptr()
        again.fill_(2.0)           # must run after `first`'s fill
    torch.cuda.synchronize()
    assert bool((again == 2.0).all()), "the buffer was written on the second stream before the first was done"


def test_a_buffer_reused_on_the_same_stream_needs_no_wait_and_keeps_its_order():
    pool = BufferPool()
    buf = pool.take(4096, torch.float32, torch.device("cuda"))
    buf.fill_(1.0)
    pool.give(buf)
    again = pool.take(100, torch.float32, torch.device("cuda"))
    again.add_(1.0)                # on the same stream: after the fill
    assert again.data_ptr() == buf.data_ptr() and again.tolist() == [2.0] * 100
