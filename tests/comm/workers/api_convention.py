"""Communicator's one convention on real ranks (tests/comm/test_api_convention.py, launched from
tests/comm/workers/ranks_per_node.py to share its 4 ranks): a call that gives no op sums and one that gives
no async_op blocks, silently, on allreduce and the compound ops alike; async_op=False blocks and returns
None on every compound op, codec names work on every op that takes a codec."""

from __future__ import annotations

import warnings

import torch

import pycomm


def _future_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def check(comm: pycomm.Communicator) -> None:
    n, r = comm.size, comm.rank
    total = float(sum(range(n)))

    # allreduce and allreduce_coalesced without op= / async_op=: the same defaults, the sum, blocking, silently.
    t = torch.tensor([float(r)])
    got, msgs = _future_warnings(lambda: comm.allreduce(t))
    assert got is None and t.item() == total and msgs == [], (got, t.item(), msgs)
    ts = [torch.full((3,), float(r)), torch.full((5,), float(r))]
    got, msgs = _future_warnings(lambda: comm.allreduce_coalesced(ts))
    assert got is None and msgs == [], (got, msgs)
    assert all(torch.equal(x, torch.full_like(x, total)) for x in ts), ts

    # Every compound op: async_op=False blocks and returns None, with the results in place; no warning.
    def blocking() -> None:
        ts = [torch.full((3,), float(r)), torch.full((5,), float(r))]
        assert comm.allreduce_coalesced(ts, op=pycomm.SUM, async_op=False) is None
        assert all(torch.equal(x, torch.full_like(x, total)) for x in ts), ts
        ts = [torch.full((4,), float(r)), torch.full((2,), float(r))]
        assert comm.broadcast_coalesced(ts, root=n - 1, async_op=False) is None
        assert all(torch.equal(x, torch.full_like(x, n - 1.0)) for x in ts), ts
        full = [torch.full((6,), float(r))]
        shard = torch.zeros(pycomm.flat_shard_numel(full, n))
        assert comm.reduce_scatter_coalesced(shard, full, op=pycomm.SUM, async_op=False) is None
        k = shard.numel()
        at = torch.arange(r * k, (r + 1) * k)
        assert torch.equal(shard, torch.where(at < 6, total, 0.0)), shard  # past 6: the zero padding
        out = [torch.zeros(6)]
        assert comm.allgather_coalesced(out, torch.full((shard.numel(),), float(r)), async_op=False) is None
        want = torch.cat([torch.full((shard.numel(),), float(k)) for k in range(n)])[:6]
        assert torch.equal(out[0], want), (out, want)
        q = torch.full((1024,), float(r + 1))
        assert comm.allreduce_quantized(q, op=pycomm.SUM, codec="int8", async_op=False) is None
        assert torch.allclose(q, torch.full_like(q, total + n), rtol=0.02), q[:4]
        # allreduce_coalesced with a codec name: the tensors travel int8 and come back in their shapes.
        ts = [torch.full((2, 3), float(r + 1)), torch.full((700,), float(r + 1))]
        assert comm.allreduce_coalesced(ts, op=pycomm.AVG, codec="int8", async_op=False) is None
        assert [x.shape for x in ts] == [torch.Size([2, 3]), torch.Size([700])]
        assert all(torch.allclose(x, torch.full_like(x, (total + n) / n), rtol=0.02) for x in ts), ts

    _, msgs = _future_warnings(blocking)
    assert msgs == [], msgs


def check_split_by_node(comm: pycomm.Communicator) -> None:
    """Later calls return the same pair; PYCOMM_RANKS_PER_NODE that does not divide the size is a ValueError
    naming the value, the size and what is expected (on every rank, before any collective)."""
    import os

    first = comm.split_by_node()
    assert comm.split_by_node() is first and comm.split_by_node()[0] is first[0], "split_by_node built new ones"
    other = comm.dup()
    old = os.environ["PYCOMM_RANKS_PER_NODE"]
    os.environ["PYCOMM_RANKS_PER_NODE"] = "3"
    try:
        other.split_by_node()
    except ValueError as e:
        assert "PYCOMM_RANKS_PER_NODE=3" in str(e) and f"{comm.size} ranks" in str(e) and "divisor of" in str(e), e
    else:
        raise AssertionError("PYCOMM_RANKS_PER_NODE=3 on 4 ranks was accepted")
    finally:
        os.environ["PYCOMM_RANKS_PER_NODE"] = old
    assert other.split_by_node()[0].size == first[0].size  # the error cached nothing
    other.shutdown()
