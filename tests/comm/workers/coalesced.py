"""Worker: allreduce_coalesced on 200 tensors of mixed dtypes and odd sizes against a numpy reference,
for several bucket sizes, with and without a bf16 wire dtype, and bad input."""
from __future__ import annotations

import numpy as np
import torch

import pycomm
from tests.comm.workers.fusion_common import as_f64, expect_raises, rank_values, unit_roundoff, world

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
        xs = np.stack([as_f64(per_rank[r][k]).reshape(-1) for r in range(size)]) if size else None
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


def check(comm, seed: int, op: str, bucket_bytes: int, wire: torch.dtype | None) -> None:
    specs = make_case(seed)
    tensors = inputs(seed, comm.rank, specs)
    work = comm.allreduce_coalesced(tensors, op=getattr(pycomm, op), bucket_bytes=bucket_bytes, wire_dtype=wire)
    work.wait()
    assert work.is_completed()
    for k, ((ref, tol), t) in enumerate(zip(expected(seed, comm.size, specs, op, wire), tensors)):
        assert t.shape == specs[k][0] and t.dtype == specs[k][1]
        err = np.abs(as_f64(t).reshape(-1) - ref)
        bad = np.nonzero(err > tol)[0]
        assert bad.size == 0, (f"{op} bucket_bytes={bucket_bytes} wire={wire}: tensor {k} {specs[k]} element "
                               f"{bad[0]}: got {as_f64(t).reshape(-1)[bad[0]]}, want {ref[bad[0]]} (tol {tol[bad[0]]})")


def check_in_flight_together(comm) -> None:
    """Two coalesced all-reduces in flight at once, waited in the reverse order."""
    specs_a, specs_b = make_case(71, 40), make_case(72, 40)
    a, b = inputs(71, comm.rank, specs_a), inputs(72, comm.rank, specs_b)
    wa = comm.allreduce_coalesced(a, op=pycomm.SUM, bucket_bytes=2048)
    wb = comm.allreduce_coalesced(b, op=pycomm.SUM, bucket_bytes=2048)
    wb.wait()
    wa.wait()
    for seed, specs, ts in ((71, specs_a, a), (72, specs_b, b)):
        for (ref, tol), t in zip(expected(seed, comm.size, specs, "SUM", None), ts):
            assert np.all(np.abs(as_f64(t).reshape(-1) - ref) <= tol)


def check_bad_input(comm) -> None:
    x = torch.ones(8)
    f = comm.allreduce_coalesced
    expect_raises(TypeError, "tensors must be a list", lambda: f(x))
    expect_raises(ValueError, r"tensors\[1\].*contiguous", lambda: f([x, torch.ones(4, 4).t()]))
    expect_raises(TypeError, r"tensors\[0\].*expected a torch.Tensor", lambda: f([np.ones(3)]))
    expect_raises(TypeError, "wire_dtype", lambda: f([x], wire_dtype=torch.int8))
    expect_raises(ValueError, "bucket_bytes", lambda: f([x], bucket_bytes=0))
    expect_raises(ValueError, "op must be", lambda: f([x], op="median"))
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
    check_in_flight_together(comm)
    print(f"rank {comm.rank}/{comm.size}: coalesced ok", flush=True)


if __name__ == "__main__":
    main()
