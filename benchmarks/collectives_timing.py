"""Timing collectives on every rank, shared by benchmarks/collectives_ranks.py and benchmarks/small_profile.py:
`timed` (back-to-back calls) and `isolated` (a barrier, then one call: what a training step sees), both reporting
the slowest rank's time; nccl-tests' bus bandwidth; host buffers on 4 KiB or transparent huge pages."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch

from pycomm import hugepages, op_stats

KIB, MIB = 1 << 10, 1 << 20


def timed(
    fns: dict[str, Callable[[], Any]], mpi_comm: Any, repeats: int, warmup: int = 2, sample_s: float = 5e-3
) -> dict[str, dict]:
    """Seconds per call of each collective in `fns`, measured interleaved (one sample of each per
    round, in a new order every round) so that the load of a shared machine falls on every peer alike.
    Ranks start each sample together (barrier) and a sample is the slowest rank's; calls shorter than
    `sample_s` are batched so the clock can see them (and, with busy neighbours, so that a sample spans
    many time slices)."""
    from mpi4py import MPI

    def sample(fn: Callable[[], Any], inner: int) -> float:
        mpi_comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return mpi_comm.allreduce((time.perf_counter() - t0) / inner, op=MPI.MAX)

    inner = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        once = min(sample(fn, 1) for _ in range(3))
        # at most 1000 calls per 5 ms of sample (the clock needs no more)
        inner[name] = max(1, min(max(1000, int(sample_s * 2e5)), int(sample_s / max(once, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats):
        # A new order every round (the same on every rank: seeded by the round), so that no case always
        # runs right after the same neighbour: in a fixed order, ResNet-50's coalesced all-reduce, run
        # right after per-tensor gloo, took 1.15-1.2x its time.
        for name in random.Random(r).sample(list(fns), len(fns)):
            samples[name].append(sample(fns[name], inner[name]))
    return {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v), "repeats": repeats, "inner": inner[name]}
        for name, v in samples.items()
    }


def isolated(
    fns: dict[str, Callable[[], Any]], mpi_comm: Any, calls: int, warmup: int = 2, budget_s: float = 2.0
) -> dict[str, dict]:
    """Seconds of one call of each collective in `fns` as a training step sees it: a barrier, then one
    call, timed alone (the slowest rank's); `calls` samples of each (fewer where a call is long: about
    `budget_s` per case), interleaved in a new order every round like `timed`'s."""
    from mpi4py import MPI

    def sample(fn: Callable[[], Any]) -> float:
        mpi_comm.Barrier()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    once = max(mpi_comm.allreduce(sample(fn), op=MPI.MAX) for fn in fns.values())
    n = max(5, min(calls, int(budget_s / max(once, 1e-7))))
    mine: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(n):
        for name in random.Random(r).sample(list(fns), len(fns)):
            mine[name].append(sample(fns[name]))
    # the slowest rank's time per call, reduced once at the end (not between the timed calls)
    slowest = {}
    for name, v in mine.items():
        arr = np.asarray(v)
        mpi_comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.MAX)
        slowest[name] = arr.tolist()
    return {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v), "repeats": n, "inner": 1}
        for name, v in slowest.items()
    }


def busbw_gbs(op: str, nbytes: int, seconds: float, n: int) -> float:
    """nccl-tests' bus bandwidth of `op` on n ranks in GB/s: algbw * the core's bus factor (op table)."""
    return nbytes / seconds * op_stats.bus_factor(op, n) / 1e9


def host_zeros(numel: int, pages: str) -> torch.Tensor:
    """Zeros on torch's default pages ("4k"), or advised for transparent huge pages before their first
    touch ("huge": what torch does itself with THP_MEM_ALLOC_ENABLE=1, see pycomm/hugepages.py)."""
    t = torch.empty(numel)
    if pages == "huge":
        hugepages.advise(t)
    return t.zero_()
