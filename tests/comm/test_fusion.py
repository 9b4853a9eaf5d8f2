"""Fused, quantized and layer-wise averaged all-reduce on real ranks (workers under tests/comm/workers),
plus the single-process parts: bucket planning and the wire layout of encodings."""

from __future__ import annotations

import functools

import pytest
import torch

import pycomm
from pycomm._codec_wire import WireLayout
from pycomm._quantized_pipeline import SEGMENT, SEGMENT_ON_OWN_CORES, default_segment
from pycomm.fusion import (
    DEVICE_BUCKET_BYTES,
    HOST_BUCKET_BYTES,
    HOST_IN_PLACE_BYTES,
    bucket_bytes_for,
    in_place_bytes_for,
    plan_buckets,
)
from pycomm.quantized import chunk_numel, segments
from tests.launch import mpirun

# worker -> the world sizes it runs on; one launch per world size runs every worker of that size in turn
# (tests/comm/workers/in_turn.py), and each test reads its worker's lines from that launch's output
WORKERS = {
    "coalesced": (1, 2, 3, 4),
    "quantized": (1, 2, 3, 4),
    "flat_shards": (1, 2, 3, 4),
    "grad_buckets": (1, 2, 3),
    "layerwise": (1, 2, 4),
}


@functools.cache
def _launch(ranks: int) -> str:
    workers = [w for w, sizes in WORKERS.items() if ranks in sizes]
    proc = mpirun(ranks, "tests.comm.workers.in_turn", *workers, timeout=900, expect_ok=False)
    return f"{' '.join(workers)} on {ranks} rank(s): exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def _oks(ranks: int, line: str) -> None:
    """Every rank printed the worker's closing line in that launch."""
    out = _launch(ranks)
    assert out.count(line) == ranks, out


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", WORKERS["coalesced"])
def test_allreduce_coalesced(ranks: int) -> None:
    _oks(ranks, "coalesced ok")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", WORKERS["quantized"])
def test_allreduce_quantized(ranks: int) -> None:
    _oks(ranks, "quantized ok")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", WORKERS["flat_shards"])
def test_reduce_scatter_and_allgather_coalesced(ranks: int) -> None:
    _oks(ranks, "flat shards ok")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", WORKERS["grad_buckets"])
def test_gradient_buckets(ranks: int) -> None:
    _oks(ranks, "grad buckets ok")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", WORKERS["layerwise"])
def test_layerwise_averager(ranks: int) -> None:
    _oks(ranks, "layerwise ok")


def test_plan_buckets_groups_by_dtype_and_fills_to_the_limit() -> None:
    ts = [
        torch.zeros(n, dtype=d)
        for n, d in [
            (10, torch.float32),
            (0, torch.float32),
            (5, torch.int64),
            (30, torch.float32),
            (3, torch.int64),
            (100, torch.float32),
        ]
    ]
    plans = plan_buckets(ts, bucket_bytes=160, wire_dtype=torch.bfloat16)
    got = [(p.dtype, p.wire_dtype, p.indices, p.numel, p.in_place) for p in plans]
    assert got == [
        (torch.float32, torch.bfloat16, [0, 3], 40, False),  # 80 bf16 bytes fit, +100 would not
        (torch.float32, torch.bfloat16, [5], 100, False),  # alone but cast: still packed
        (torch.int64, torch.int64, [2, 4], 8, False),
    ]  # integers are never cast
    alone = plan_buckets(ts, bucket_bytes=1, wire_dtype=None)
    assert all(p.in_place for p in alone) and len(alone) == 5  # the empty tensor is skipped


def test_plan_buckets_reduces_tensors_from_the_in_place_size_where_they_lie() -> None:
    # in_place_bytes 40: 10 float32 elements and more go alone (one below stays packed); the open bucket
    # stays open across them, so the small tensors after a large one still share it
    sizes = [9, 10, 2, 11, 3, 5, 0, 1]
    ts = [torch.zeros(n) for n in sizes] + [torch.zeros(5, dtype=torch.float64)]  # 40 bytes of float64
    plans = plan_buckets(ts, bucket_bytes=64, wire_dtype=None, in_place_bytes=40)
    got = [(p.indices, p.numel, p.in_place) for p in plans]
    assert got == [
        ([0, 2, 4], 14, False),  # 56 bytes; +5 elements would pass 64
        ([1], 10, True),
        ([3], 11, True),
        ([5, 7], 6, False),  # the empty tensor is skipped
        ([8], 5, True),
    ]  # float64: 40 bytes in its own dtype
    # a cast tensor is copied anyway: it stays packed however large; integers are never cast
    cast = plan_buckets(
        [torch.zeros(100), torch.zeros(100, dtype=torch.int32)],
        bucket_bytes=1000,
        wire_dtype=torch.bfloat16,
        in_place_bytes=40,
    )
    assert [(p.wire_dtype, p.indices, p.in_place) for p in cast] == [
        (torch.bfloat16, [0], False),
        (torch.int32, [1], True),
    ]
    # None: the old plan, a tensor alone only when larger than a bucket
    assert [p.indices for p in plan_buckets(ts[:3], bucket_bytes=64, wire_dtype=None)] == [[0], [1, 2]]


def test_in_place_size_follows_where_tensors_live() -> None:
    host, gpu = [torch.zeros(3)], [torch.zeros(3, device="meta")]
    assert in_place_bytes_for(host, 4 << 20) == HOST_IN_PLACE_BYTES < 4 << 20
    assert in_place_bytes_for(host, 100) == 100  # never above the bucket size
    assert in_place_bytes_for(gpu, 25 << 20) == (25 << 20) + 1  # GPUs: only tensors larger than a bucket
    n = HOST_IN_PLACE_BYTES // 4
    plans = plan_buckets(
        [torch.zeros(n - 1), torch.zeros(n), torch.zeros(1)],
        HOST_BUCKET_BYTES,
        None,
        in_place_bytes_for(host, HOST_BUCKET_BYTES),
    )
    assert [(p.indices, p.in_place) for p in plans] == [([0, 2], False), ([1], True)]


@pytest.mark.parametrize(
    "numel,size,block,want",
    [(0, 3, 256, 0), (1, 4, 256, 256), (1000, 3, 256, 512), (1024, 4, 256, 256), (1025, 4, 64, 320)],
)
def test_chunk_numel_is_whole_blocks_covering_the_tensor(numel: int, size: int, block: int, want: int) -> None:
    c = chunk_numel(numel, size, block)
    assert c == want and c % block == 0 and c * size >= numel


@pytest.mark.parametrize("codec", [pycomm.Int8Codec(block=64), pycomm.Int4Codec(block=6), pycomm.OneBitCodec(block=8)])
def test_wire_layout_round_trips_each_slot(codec) -> None:
    chunk, slots = 3 * codec.block, 3
    wire = WireLayout(codec, chunk, slots, torch.device("cpu"))
    assert wire.slot_bytes % 4 == 0 and wire.slot_bytes >= codec.wire_bytes(chunk)
    buf = wire.buffer()
    xs = [torch.randn(chunk) for _ in range(slots)]
    for r, x in enumerate(xs):
        wire.encode_into(buf, r, x, None)
    for r, x in enumerate(xs):
        out = torch.empty(chunk)
        wire.decode(buf, r, out)
        direct = torch.empty(chunk)
        codec.decode(codec.encode(x), direct)
        assert torch.equal(out, direct), f"slot {r} decodes differently from a direct encode"
    wire.release(buf)


@pytest.mark.parametrize(
    "numel, size, block, segment",
    [(0, 2, 256, "1000"), (1, 3, 256, "1000"), (100_003, 3, 64, "1000"), (5000, 4, 256, "")],
)
def test_segments_tile_the_tensor_in_whole_block_chunks(
    monkeypatch: pytest.MonkeyPatch, numel: int, size: int, block: int, segment: str
) -> None:
    monkeypatch.setenv("PYCOMM_QUANTIZED_SEGMENT", segment)
    segs = segments(numel, size, block, SEGMENT)
    assert (len(segs) == 0) == (numel == 0)
    assert [s.lo for s in segs] == [0, *(s.hi for s in segs[:-1])][: len(segs)] and (
        segs[-1].hi if segs else 0
    ) == numel
    assert all(s.c % block == 0 and s.lo % (size * block) == 0 and size * s.c >= s.hi - s.lo for s in segs)
    assert [s.mine for s in segs] == [sum(s.c for s in segs[:i]) for i in range(len(segs))]
    if numel == 100_003:
        assert segs[0].c == 384 and len(segs) == -(-numel // (3 * 384))  # ceil(1000 / 3) = 334 -> whole 64-blocks


def test_default_segment_is_smaller_only_for_host_ranks_with_a_core_each(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_segment(oversubscribed=False, on_gpu=False) == SEGMENT_ON_OWN_CORES < SEGMENT
    assert default_segment(oversubscribed=True, on_gpu=False) == SEGMENT
    assert default_segment(oversubscribed=None, on_gpu=False) == SEGMENT  # gloo, nccl: no agreed flag
    assert default_segment(oversubscribed=False, on_gpu=True) == SEGMENT
    monkeypatch.delenv("PYCOMM_QUANTIZED_SEGMENT", raising=False)
    numel = 3 * SEGMENT
    assert len(segments(numel, 2, 256, SEGMENT_ON_OWN_CORES)) == 3 * SEGMENT // SEGMENT_ON_OWN_CORES
    monkeypatch.setenv("PYCOMM_QUANTIZED_SEGMENT", str(SEGMENT))  # the setting wins over the default
    assert len(segments(numel, 2, 256, SEGMENT_ON_OWN_CORES)) == 3


def test_segment_size_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCOMM_QUANTIZED_SEGMENT", "-5")
    with pytest.raises(ValueError, match="PYCOMM_QUANTIZED_SEGMENT='-5' is not valid: expected a whole number"):
        segments(10, 2, 256, SEGMENT)


def test_default_bucket_size_follows_where_tensors_live() -> None:
    # host tensors: cache-sized buckets; device tensors (meta stands in for a GPU here): DDP's 25 MiB
    assert bucket_bytes_for(None, [torch.zeros(3)], "x") == HOST_BUCKET_BYTES == 4 << 20
    assert bucket_bytes_for(None, [torch.zeros(3, device="meta")], "x") == DEVICE_BUCKET_BYTES == 25 << 20
    assert bucket_bytes_for(123, [torch.zeros(3)], "x") == 123
    with pytest.raises(ValueError, match=r"x: bucket_bytes must be a positive int, or None .*4 MiB.*got 0"):
        bucket_bytes_for(0, [torch.zeros(3)], "x")


def test_gradient_buckets_on_host_cut_at_four_mib_by_default() -> None:
    # three 3 MiB gradients: one bucket each at the host default, one bucket for all at 25 MiB
    params = [torch.nn.Parameter(torch.zeros(3 << 18)) for _ in range(3)]
    by_default = pycomm.GradientBuckets(params, launch=lambda bucket: None)
    explicit = pycomm.GradientBuckets(params, launch=lambda bucket: None, bucket_bytes=25 << 20)
    assert [len(b.params) for b in by_default.buckets] == [1, 1, 1]
    assert [len(b.params) for b in explicit.buckets] == [3]
    by_default.remove_hooks()
    explicit.remove_hooks()
