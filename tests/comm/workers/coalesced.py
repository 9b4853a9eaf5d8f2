"""Worker: allreduce_coalesced on 200 tensors of mixed dtypes and odd sizes against a numpy reference,
for several bucket sizes, with and without a bf16 wire dtype, async and blocking; the routing of large
tensors (reduced where they lie) against small ones (packed) at every edge of the thresholds; and bad
input."""

from __future__ import annotations

import functools

import numpy as np
import torch

import pycomm
from pycomm.fusion import HOST_IN_PLACE_BYTES
from tests.comm.workers.common import as_np
from tests.comm.workers.fusion_common import expect_raises, rank_values, unit_roundoff, world

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64]
ODD_SIZES = [0, 1, 2, 3, 7, 31, 255, 256, 257, 1000, 4099]


def make_case(seed: int, count: int = 200) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each tensor: every dtype, the odd sizes, and random ones (some 2-D)."""
    g = np.random.default_rng(seed)
    specs = []
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        n = ODD_SIZES[i % len(ODD_SIZES)] if i < 3 * len(ODD_SIZES) else int(g.integers(0, 3000))
        shape = (n,) if n % 3 or n == 0 else (3, n // 3)
        specs.append((shape, dtype))
    return specs


def inputs(seed: int, rank: int, specs) -> list[torch.Tensor]:
    out = []
    for k, (shape, dtype) in enumerate(specs):
        numel = int(np.prod(shape))
        # fp16 stays well inside its range after summing over ranks
        vals = rank_values(seed * 1000 + k, rank, numel, dtype if dtype != torch.float16 else torch.float32)
        out.append(vals.to(dtype).reshape(shape))
    return out


def expected(seed: int, size: int, specs, op: str, wire: torch.dtype | None):
    """Per tensor: (reference in float64, allowed absolute error per element)."""
    per_rank = [inputs(seed, r, specs) for r in range(size)]
    refs = []
    for k, (shape, dtype) in enumerate(specs):
        xs = np.stack([as_np(per_rank[r][k]).reshape(-1) for r in range(size)]) if size else None
        if not dtype.is_floating_point:
            tot = xs.sum(0)
            ref = {"SUM": tot, "AVG": np.floor_divide(tot, size), "MAX": xs.max(0), "MIN": xs.min(0)}[op]
            refs.append((ref, np.zeros_like(ref)))
            continue
        u = max(unit_roundoff(dtype), unit_roundoff(wire) if wire is not None else 0.0)
        if op in ("MAX", "MIN"):
            ref = xs.max(0) if op == "MAX" else xs.min(0)
            refs.append((ref, 2 * u * np.abs(ref)))
            continue
        scale = 1.0 / size if op == "AVG" else 1.0
        ref = xs.sum(0) * scale
        # one rounding at pack, one per step of the sum over ranks, one at unpack
        refs.append((ref, 2 * (size + 2) * u * np.abs(xs).sum(0) * scale + 1e-300))
    return refs


def check(
    comm, seed: int, op: str, bucket_bytes: int | None, wire: torch.dtype | None, specs=None, async_op: bool = True
) -> list[torch.Tensor]:
    specs = make_case(seed) if specs is None else specs
    tensors = inputs(seed, comm.rank, specs)
    work = comm.allreduce_coalesced(
        tensors, op=getattr(pycomm, op), bucket_bytes=bucket_bytes, wire_dtype=wire, async_op=async_op
    )
    if async_op:
        work.wait()
        assert work.is_completed()
    else:
        assert work is None, "async_op=False returns None, like every blocking op"
    for k, ((ref, tol), t) in enumerate(zip(expected(seed, comm.size, specs, op, wire), tensors)):
        assert t.shape == specs[k][0] and t.dtype == specs[k][1]
        err = np.abs(as_np(t).reshape(-1) - ref)
        bad = np.nonzero(err > tol)[0]
        assert bad.size == 0, (
            f"{op} bucket_bytes={bucket_bytes} wire={wire}: tensor {k} {specs[k]} element "
            f"{bad[0]}: got {as_np(t).reshape(-1)[bad[0]]}, want {ref[bad[0]]} (tol {tol[bad[0]]})"
        )
    return tensors


def edge_case(threshold: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Tensors one element below, at and one above `threshold` bytes for several dtypes, with small ones
    between (so an open bucket spans the large ones), a 1-element one and an empty one."""
    specs: list[tuple[tuple[int, ...], torch.dtype]] = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32):
        n = threshold // torch.empty((), dtype=dtype).element_size()
        specs += [((n - 1,), dtype), ((3,), dtype), ((n,), dtype), ((0,), dtype), ((1, n + 1), dtype), ((1,), dtype)]
    return specs


def check_routing(comm) -> None:
    """Large tensors are reduced where they lie, small ones packed: at each edge of the in-place size
    (the host default, and the bucket size when smaller), async and blocking, SUM / AVG, bf16 wire; the
    blocking and async paths agree exactly on every integer tensor and within tolerance on floats."""
    for seed, (threshold, bucket_bytes) in enumerate([(HOST_IN_PLACE_BYTES, None), (4096, 4096), (512, 512)], 30):
        specs = edge_case(threshold)
        for op, wire in (("SUM", None), ("AVG", None), ("AVG", torch.bfloat16), ("MAX", None)):
            by_async = check(comm, seed, op, bucket_bytes, wire, specs, async_op=True)
            by_block = check(comm, seed, op, bucket_bytes, wire, specs, async_op=False)
            for k, (a, b) in enumerate(zip(by_async, by_block)):
                if not a.dtype.is_floating_point:
                    assert torch.equal(a, b), f"{op} threshold {threshold}: tensor {k} {specs[k]} differs"
    # a bucket filled exactly to bucket_bytes, then one element more
    check(comm, 40, "SUM", 64, None, [((8,), torch.float32), ((8,), torch.float32), ((1,), torch.float32)])
    check(comm, 41, "AVG", 64, None, [((16,), torch.float32), ((1,), torch.float32)], async_op=False)


def check_short_lists(comm) -> None:
    """One tensor, one element, only empties, nothing at all: every path returns with the right result."""
    for async_op in (True, False):
        check(comm, 50, "SUM", None, None, [((1,), torch.float32)], async_op=async_op)
        check(comm, 51, "AVG", None, None, [((1,), torch.int64)], async_op=async_op)
        check(comm, 52, "SUM", None, None, [((0,), torch.float32), ((0,), torch.int32)], async_op=async_op)
        check(comm, 53, "SUM", None, None, [], async_op=async_op)


def check_in_flight_together(comm) -> None:
    """Two coalesced all-reduces in flight at once, waited in the reverse order."""
    specs_a, specs_b = make_case(71, 40), make_case(72, 40)
    a, b = inputs(71, comm.rank, specs_a), inputs(72, comm.rank, specs_b)
    wa = comm.allreduce_coalesced(a, op=pycomm.SUM, bucket_bytes=2048, async_op=True)
    wb = comm.allreduce_coalesced(b, op=pycomm.SUM, bucket_bytes=2048, async_op=True)
    wb.wait()
    wa.wait()
    for seed, specs, ts in ((71, specs_a, a), (72, specs_b, b)):
        for (ref, tol), t in zip(expected(seed, comm.size, specs, "SUM", None), ts):
            assert np.all(np.abs(as_np(t).reshape(-1) - ref) <= tol)


def check_bad_input(comm) -> None:
    x = torch.ones(8)
    f = functools.partial(comm.allreduce_coalesced, op=pycomm.AVG, async_op=True)  # each case overrides one
    expect_raises(TypeError, "tensors must be a list", lambda: f(x))
    expect_raises(ValueError, r"tensors\[1\].*contiguous", lambda: f([x, torch.ones(4, 4).t()]))
    expect_raises(TypeError, r"tensors\[0\].*expected a torch.Tensor", lambda: f([np.ones(3)]))
    expect_raises(TypeError, "wire_dtype", lambda: f([x], wire_dtype=torch.int8))
    expect_raises(ValueError, "bucket_bytes", lambda: f([x], bucket_bytes=0))
    expect_raises(ValueError, "op must be", lambda: f([x], op="median"))
    expect_raises(TypeError, "allreduce_coalesced: async_op", lambda: f([x], async_op="no"))
    expect_raises(TypeError, "broadcast_coalesced: async_op", lambda: comm.broadcast_coalesced([x], async_op=1))
    expect_raises(ValueError, r"tensors\[0\].*contiguous", lambda: f([torch.ones(4, 4).t()], async_op=False))
    assert torch.equal(x, torch.ones(8)), "a rejected call must not touch the tensors"


def main() -> None:
    comm = world()
    check_bad_input(comm)
    for seed, bucket_bytes in enumerate((1, 4096, 64 << 10, 25 << 20)):
        for wire in (None, torch.bfloat16):
            check(comm, seed, "AVG", bucket_bytes, wire)
    check(comm, 11, "SUM", 4096, None)
    check(comm, 12, "SUM", 64 << 10, torch.float16)
    check(comm, 13, "MAX", 4096, None)
    check(comm, 14, "MIN", 4096, torch.bfloat16)
    check(comm, 15, "AVG", None, None, async_op=False)
    check(comm, 16, "SUM", 4096, torch.bfloat16, async_op=False)
    check_routing(comm)
    check_short_lists(comm)
    check_in_flight_together(comm)
    print(f"rank {comm.rank}/{comm.size}: coalesced ok", flush=True)


if __name__ == "__main__":
    main()
