"""Worker: reduce_scatter_coalesced / allgather_coalesced / broadcast_coalesced against a float64
reference every rank computes itself: odd sizes (padding on the last ranks), several bucket sizes,
bf16 wire, the int8 codec within its bound, and bad input."""

from __future__ import annotations

import torch

import pycomm
from pycomm.fusion import HOST_IN_PLACE_BYTES
from tests.comm.workers.fusion_common import expect_raises, rank_values, unit_roundoff, world

SIZES = [1, 3, 7, 256, 257, 1000, 4099]


def inputs(seed: int, rank: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return [
        rank_values(seed * 100 + k, rank, n, dtype).reshape((n // 7, 7) if n % 7 == 0 and n > 7 else (n,))
        for k, n in enumerate(SIZES)
    ]


def flat(ts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in ts])


def padded_mean(seed: int, size: int, shard: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean over ranks of the padded flat vectors, sum of |values| for the rounding bound), float64."""
    xs = torch.stack([flat(inputs(seed, r)) for r in range(size)])
    pad = size * shard - xs.shape[1]
    xs = torch.nn.functional.pad(xs, (0, pad))
    return xs.mean(0), xs.abs().sum(0) / size


def check_reduce_scatter(comm: pycomm.Communicator) -> None:
    for seed, bucket_bytes, wire in [(1, 25 << 20, None), (2, 64, None), (3, 1000, torch.bfloat16), (4, 40, None)]:
        ts = inputs(seed, comm.rank)
        shard_n = pycomm.flat_shard_numel(ts, comm.size)
        shard = torch.full((shard_n,), float("nan"))
        comm.reduce_scatter_coalesced(
            shard, ts, op=pycomm.AVG, bucket_bytes=bucket_bytes, wire_dtype=wire, async_op=True
        ).wait()
        mean, mag = padded_mean(seed, comm.size, shard_n)
        mine = slice(comm.rank * shard_n, (comm.rank + 1) * shard_n)
        u = max(unit_roundoff(torch.float32), unit_roundoff(wire) if wire else 0.0)
        err = (shard.double() - mean[mine]).abs()
        assert bool((err <= 2 * (comm.size + 2) * u * mag[mine] + 1e-12).all()), (
            f"reduce_scatter_coalesced seed {seed}: max err {float(err.max())}"
        )


def check_reduce_scatter_int8(comm: pycomm.Communicator) -> None:
    codec = pycomm.Int8Codec(block=64)
    ts = inputs(5, comm.rank)
    shard_n = pycomm.flat_shard_numel(ts, comm.size)
    shard = torch.empty(shard_n)
    comm.reduce_scatter_coalesced(shard, ts, op=pycomm.SUM, bucket_bytes=700, codec=codec, async_op=True).wait()
    mean, _ = padded_mean(5, comm.size, shard_n)
    mine = slice(comm.rank * shard_n, (comm.rank + 1) * shard_n)
    # each other rank's chunk was encoded once: its error is within that chunk's own bound
    per_rank = [
        torch.nn.functional.pad(flat(inputs(5, r)), (0, comm.size * shard_n - flat(inputs(5, r)).numel()))
        for r in range(comm.size)
    ]
    bound = (
        sum(
            torch.as_tensor(codec.error_bound(per_rank[r][mine].float())).double()
            for r in range(comm.size)
            if r != comm.rank
        )
        if comm.size > 1
        else torch.zeros(shard_n)
    )
    err = (shard.double() - comm.size * mean[mine]).abs()
    assert bool((err <= bound + 1e-6).all()), f"int8 reduce_scatter: max err {float(err.max())}"
    if comm.size > 1:
        assert float(err.max()) > 0, "int8 reduce_scatter: no error at all, so nothing went through the codec"


def check_allgather(comm: pycomm.Communicator) -> None:
    for seed, bucket_bytes, wire in [(6, 25 << 20, None), (7, 64, None), (8, 100, torch.float16)]:
        want = inputs(seed, 0)  # the full tensors every rank ends with
        shard_n = pycomm.flat_shard_numel(want, comm.size)
        padded = torch.nn.functional.pad(flat(want).float(), (0, comm.size * shard_n - flat(want).numel()))
        shard = padded[comm.rank * shard_n : (comm.rank + 1) * shard_n].clone()
        out = [torch.full_like(t, float("nan")) for t in want]
        comm.allgather_coalesced(out, shard, bucket_bytes=bucket_bytes, wire_dtype=wire, async_op=True).wait()
        for o, w in zip(out, want):
            tol = 0.0 if wire is None else 2 * unit_roundoff(wire) * float(w.abs().max())
            assert float((o - w).abs().max()) <= tol, f"allgather_coalesced seed {seed}"
    codec = pycomm.Int8Codec(block=32)
    shard = padded[comm.rank * shard_n : (comm.rank + 1) * shard_n].clone()
    out = [torch.zeros_like(t) for t in want]
    comm.allgather_coalesced(out, shard, bucket_bytes=300, codec=codec, async_op=True).wait()
    err = (flat(out) - flat(want)).abs()
    limit = float(padded.abs().max()) / 127 / 2 * 1.01 + 1e-7  # per-element int8 bound, largest block scale
    assert float(err.max()) <= limit, f"int8 allgather: max err {float(err.max())} > {limit}"


def check_consecutive(comm: pycomm.Communicator) -> None:
    """Views of one buffer with no padding (the zero-copy path) and with padding (packed): same answers."""
    for total in (12 * 1001, 12 * 1001 + 5):

        def views(rank: int) -> list[torch.Tensor]:
            buf = rank_values(11, rank, total, torch.float32)
            return list(buf.split([total // 3, total // 2, total - total // 3 - total // 2]))

        ts = views(comm.rank)
        shard_n = pycomm.flat_shard_numel(ts, comm.size)
        shard = torch.empty(shard_n)
        comm.reduce_scatter_coalesced(shard, ts, op=pycomm.AVG, async_op=True).wait()
        xs = torch.stack([torch.cat(views(r)).double() for r in range(comm.size)]).mean(0)
        xs = torch.nn.functional.pad(xs, (0, comm.size * shard_n - total))
        mine = xs[comm.rank * shard_n : (comm.rank + 1) * shard_n]
        assert torch.allclose(shard.double(), mine, atol=1e-5), f"consecutive reduce_scatter, total {total}"
        out = [torch.full_like(t, float("nan")) for t in ts]
        flat_out = torch.cat(out)
        out = list(flat_out.split([t.numel() for t in ts]))
        comm.allgather_coalesced(out, shard, async_op=True).wait()
        assert torch.allclose(flat_out.double(), xs[:total], atol=1e-5), f"consecutive allgather, total {total}"


def check_broadcast(comm: pycomm.Communicator) -> None:
    root = comm.size - 1
    ts = [
        rank_values(9, comm.rank, n, d)
        for n, d in [
            (5, torch.float32),
            (3, torch.int64),
            (1000, torch.float32),
            (0, torch.float64),
            (7, torch.bfloat16),
        ]
    ]
    want = [rank_values(9, root, t.numel(), t.dtype) for t in ts]
    comm.broadcast_coalesced(ts, root=root, bucket_bytes=64, async_op=True).wait()
    assert all(torch.equal(t, w) for t, w in zip(ts, want)), "broadcast_coalesced"
    # large tensors (at and past the in-place size) sent where they lie, small ones packed; both paths
    n = HOST_IN_PLACE_BYTES // 4
    for async_op in (True, False):
        specs = [
            (n - 1, torch.float32),
            (2, torch.int64),
            (n, torch.float32),
            (n // 2, torch.float64),
            (1, torch.int32),
        ]
        ts = [rank_values(10 + async_op, comm.rank, k, d) for k, d in specs]
        want = [rank_values(10 + async_op, root, t.numel(), t.dtype) for t in ts]
        work = comm.broadcast_coalesced(ts, root=root, async_op=async_op)
        if async_op:
            work.wait()
        else:
            assert work is None
        assert all(torch.equal(t, w) for t, w in zip(ts, want)), f"broadcast_coalesced async_op={async_op}"


def check_bad_input(comm: pycomm.Communicator) -> None:
    ts = [torch.zeros(10), torch.zeros(5)]
    n = pycomm.flat_shard_numel(ts, comm.size)
    expect_raises(
        ValueError,
        r"shard has 1 elements; expected ceil\(15 / size\)",
        lambda: comm.reduce_scatter_coalesced(torch.zeros(1 if n != 1 else 2), ts, op=pycomm.AVG, async_op=True),
    )
    expect_raises(
        TypeError,
        "share one dtype",
        lambda: comm.reduce_scatter_coalesced(
            torch.zeros(n), [torch.zeros(10), torch.zeros(5, dtype=torch.float64)], op=pycomm.AVG, async_op=True
        ),
    )
    expect_raises(
        TypeError,
        "shard has dtype torch.float64",
        lambda: comm.allgather_coalesced(ts, torch.zeros(n, dtype=torch.float64), async_op=True),
    )
    expect_raises(ValueError, "tensors is empty", lambda: comm.allgather_coalesced([], torch.zeros(1), async_op=True))
    expect_raises(
        ValueError,
        "not both",
        lambda: comm.reduce_scatter_coalesced(
            torch.zeros(n), ts, wire_dtype=torch.bfloat16, codec=pycomm.Int8Codec(), op=pycomm.AVG, async_op=True
        ),
    )
    expect_raises(
        TypeError,
        "op AVG needs floating",
        lambda: comm.reduce_scatter_coalesced(
            torch.zeros(n, dtype=torch.int32), [torch.zeros(15, dtype=torch.int32)], op=pycomm.AVG, async_op=True
        ),
    )
    expect_raises(
        ValueError,
        "bucket_bytes must be a positive int",
        lambda: comm.allgather_coalesced(ts, torch.zeros(n), bucket_bytes=0, async_op=True),
    )
    expect_raises(
        ValueError, "root must be a rank", lambda: comm.broadcast_coalesced(ts, root=comm.size, async_op=True)
    )


def main() -> None:
    torch.set_num_threads(1)
    comm = world()
    check_bad_input(comm)
    check_reduce_scatter(comm)
    check_reduce_scatter_int8(comm)
    check_allgather(comm)
    check_consecutive(comm)
    check_broadcast(comm)
    print(f"rank {comm.rank} flat shards ok", flush=True)


if __name__ == "__main__":
    main()
