"""The per-rank half of benchmarks/trace_overhead.py, run under mpirun with whichever pycomm is on
PYTHONPATH (the current tree, or the build from before tracing): seconds per blocking 4 KiB all-reduce,
each sample the slowest rank's over `calls` calls; with --variants off,on the two are interleaved
sample by sample in this one process (tracing switched on and off between samples)."""

from __future__ import annotations

import argparse
import json
import time

import torch
from mpi4py import MPI

import pycomm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variants", default="off", help="comma list: off (no tracing), on (tracing)")
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    comm, mpi = pycomm.init(), MPI.COMM_WORLD
    t = torch.ones(args.bytes // 4)
    variants = args.variants.split(",")
    if "on" in variants:
        from pycomm import tracing

    def sample(variant: str) -> float:
        if variant == "on":
            tracing.enable()
        mpi.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            comm.allreduce(t, op=pycomm.SUM)
        dt = mpi.allreduce((time.perf_counter() - t0) / args.calls, op=MPI.MAX)
        if variant == "on":
            tracing.disable()
            tracing.drain()  # empty the rings: every "on" sample records into a ring of the same state
        return dt

    for v in variants:  # warm-up
        sample(v)
    rows: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.samples):
        for v in variants if i % 2 == 0 else variants[::-1]:
            rows[v].append(sample(v))
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
