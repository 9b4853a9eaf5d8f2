"""Shared by the comm workers: deterministic per-rank inputs (so each rank can compute every rank's
input and hence a numpy reference without communicating) and comparisons."""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

if TYPE_CHECKING:
    import pycomm

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.int8, torch.uint8]


def rank_input(rank: int, numel: int, dtype: torch.dtype, case: str) -> torch.Tensor:
    """Small integers (exact in every dtype, and their sums too), different per rank and case."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    lo = 0 if dtype == torch.uint8 else -8
    return torch.randint(lo, 9, (numel,), generator=g).to(dtype)


def as_np(t: torch.Tensor) -> np.ndarray:
    """float64 numpy copy of any tensor, on any device (bf16 has no numpy dtype)."""
    return t.detach().cpu().to(torch.float64).numpy()


def assert_close(got: torch.Tensor, want: np.ndarray, what: str, exact: bool = True) -> None:
    g = as_np(got)
    if exact:
        ok = np.array_equal(g, want)
    else:
        tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(got.dtype, 1e-6)
        ok = np.allclose(g, want, rtol=tol, atol=tol)
    if not ok:
        bad = np.flatnonzero(~np.isclose(g, want)) if g.shape == want.shape else []
        raise AssertionError(
            f"{what}: dtype {got.dtype}, numel {got.numel()}: got {g[:8]}... want {want[:8]}... "
            f"(first bad index {bad[:1]})"
        )


def stall_without_last_rank(
    side: "pycomm.Communicator", last: int, rank: int, call: Callable[[], Any], what: str
) -> None:
    """Every rank but `last` runs `call` (an op `last` never joins) and prints `MARK rank R stall{what}
    after T s: <the StallError>` (or `no stall error`), then releases `last` over `side`; `last` waits
    asleep in Python, so no pycomm call of it reaches MPI meanwhile."""
    import pycomm

    if rank != last:
        t0 = time.perf_counter()
        try:
            call()
        except pycomm.StallError as e:
            print(f"MARK rank {rank} stall{what} after {time.perf_counter() - t0:.1f} s: {e}", flush=True)
        else:
            print(f"MARK rank {rank} no stall error", flush=True)
        side.send(torch.ones(1), last)
    else:
        flags = [torch.zeros(1) for _ in range(last)]
        works = [side.irecv(f, r) for r, f in enumerate(flags)]
        while not all(w.is_completed() for w in works):
            time.sleep(0.05)
