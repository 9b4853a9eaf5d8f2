"""Communicator's one convention (docs/api.md): op=SUM and async_op=False as the defaults of every op, the
compound ops' options keyword-only in one order, codec names on every compound op that takes a codec and a
clear ValueError naming the choices for a bad one; the op table the core exports. One process (the local transport) here; the multi-rank checks run in
tests/comm/workers/api_convention.py on test_ranks_per_node's 4 ranks."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

import pycomm
from pycomm import op_stats
from pycomm._build import core
from pycomm.codecs import CODEC_NAMES
from pycomm.communicator import Communicator

REDUCING = ("allreduce", "reduce_scatter", "allreduce_coalesced", "reduce_scatter_coalesced", "allreduce_quantized")
COMPOUND = (
    "allreduce_coalesced",
    "broadcast_coalesced",
    "reduce_scatter_coalesced",
    "allgather_coalesced",
    "allreduce_quantized",
)
OPTIONS = ("bucket_bytes", "wire_dtype", "codec", "error_feedback", "async_op")  # the compound ops' one order


def local() -> Communicator:
    return Communicator(core().local_transport(), "local")


def test_every_op_takes_op_and_async_op() -> None:
    """The signature of every collective: op=SUM on each reducing op, async_op=False on every op, codec on
    every compound op."""
    for name in REDUCING:
        assert inspect.signature(getattr(Communicator, name)).parameters["op"].default is pycomm.SUM, name
    for name in ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier") + COMPOUND:
        assert inspect.signature(getattr(Communicator, name)).parameters["async_op"].default is False, name
    for name in COMPOUND:
        assert "codec" in inspect.signature(getattr(Communicator, name)).parameters, name


def test_compound_ops_take_their_options_by_keyword_in_one_order() -> None:
    """After the tensors (and op, root), every option of a compound op is keyword-only, in OPTIONS' order; an
    option passed by position is a TypeError, not a silently different argument."""
    for name in COMPOUND:
        params = list(inspect.signature(getattr(Communicator, name)).parameters.values())
        keyword = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert keyword == [o for o in OPTIONS if o in keyword], (name, keyword)
        assert {p.name for p in params} - set(keyword) <= {"self", "tensor", "tensors", "shards", "op", "root"}, name
    c = local()
    with pytest.raises(TypeError, match="positional"):
        c.allreduce_coalesced([torch.ones(2)], pycomm.SUM, None)


def test_defaults_are_silent_and_block() -> None:
    """A call that gives no op or async_op gets the defaults, with no warning: the compound ops block and
    return None, as allreduce does."""
    c = local()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.allreduce(torch.ones(2)) is None
        assert c.allreduce_quantized(torch.ones(8)) is None
        assert c.allreduce_coalesced([torch.ones(3)]) is None
        assert c.broadcast_coalesced([torch.ones(3)]) is None


@pytest.mark.parametrize("name", sorted(CODEC_NAMES))
def test_codec_names_on_every_compound_op(name: str) -> None:
    """Each name works where a codec applies and gives the class's default instance; broadcast_coalesced
    refuses any codec, naming why."""
    c = local()
    codec = CODEC_NAMES[name]()

    def near(got: torch.Tensor, want: torch.Tensor) -> bool:  # within the codec's own error bound
        return bool(((got - want).abs() <= codec.error_bound(want) + 1e-6).all())

    x = torch.linspace(-1, 1, 512)
    t = x.clone()
    assert c.allreduce_quantized(t, op=pycomm.SUM, codec=name, async_op=False) is None
    assert near(t, x)
    ts = [x.clone(), x[:256].clone().view(16, 16)]
    assert c.allreduce_coalesced(ts, op=pycomm.SUM, codec=name, async_op=False) is None
    assert ts[1].shape == (16, 16) and near(torch.cat([ts[0], ts[1].reshape(-1)]), torch.cat([x, x[:256]]))
    shard = torch.zeros(pycomm.flat_shard_numel([x], 1))
    assert c.reduce_scatter_coalesced(shard, [x.clone()], op=pycomm.SUM, codec=name, async_op=False) is None
    assert near(shard, x)
    out = [torch.zeros(512)]
    assert c.allgather_coalesced(out, shard, codec=name, async_op=False) is None
    assert near(out[0], shard)
    with pytest.raises(ValueError, match="broadcast_coalesced: codec must be None .*exactly"):
        c.broadcast_coalesced([x.clone()], async_op=False, codec=name)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.allreduce_quantized(torch.ones(4), op=pycomm.SUM, codec="gzip", async_op=False),
        lambda c: c.allreduce_coalesced([torch.ones(4)], op=pycomm.SUM, codec="gzip", async_op=False),
        lambda c: c.reduce_scatter_coalesced(
            torch.zeros(4), [torch.ones(4)], op=pycomm.SUM, codec="gzip", async_op=False
        ),
        lambda c: c.allgather_coalesced([torch.ones(4)], torch.zeros(4), codec="gzip", async_op=False),
    ],
    ids=["allreduce_quantized", "allreduce_coalesced", "reduce_scatter_coalesced", "allgather_coalesced"],
)
def test_bad_codec_name_names_the_choices(call) -> None:
    with pytest.raises(ValueError, match=r"codec 'gzip' is not a codec name; expected one of 'int8', .*'1bit'"):
        call(local())


def test_op_table_is_the_one_bus_factor() -> None:
    """The core's table (nccl-tests' factors) is what the Python-side stats use; an unknown op is refused."""
    rows = {r["name"]: r for r in core().op_table()}
    assert {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "send", "recv"} <= set(rows)
    assert rows["allgather"]["bytes"] == "out" and rows["reduce_scatter"]["bytes"] == "tensor"
    for n in (1, 2, 4, 8):
        assert op_stats.bus_factor("allreduce", n) == pytest.approx(2 * (n - 1) / n)
        assert op_stats.bus_factor("allgather", n) == pytest.approx((n - 1) / n)
        assert op_stats.bus_factor("broadcast", n) == 1.0 and op_stats.bus_factor("barrier", n) == 0.0
        for name, r in rows.items():
            assert op_stats.bus_factor(name, n) == pytest.approx(r["ring_multiple"] * (n - 1) / n + r["constant"])
    with pytest.raises(ValueError, match="unknown op 'allreduc'; expected one of allreduce, broadcast"):
        op_stats.bus_factor("allreduc", 2)
