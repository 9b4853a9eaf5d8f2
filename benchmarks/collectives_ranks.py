"""The per-rank half of benchmarks/collectives.py: run under mpirun, it measures one section on every
rank and rank 0 writes the rows to a JSON file. Times are the slowest rank's, per call."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Callable

import torch

import pycomm
from benchmarks.collectives_timing import KIB, MIB, busbw_gbs, host_zeros, isolated, timed
from benchmarks.resnet50_shapes import resnet50_shapes
from pycomm import hugepages


class Peers:
    """The three implementations measured side by side on the same buffers."""

    def __init__(self, gloo_port: int | None) -> None:
        from mpi4py import MPI

        self.mpi = MPI.COMM_WORLD
        self.comm = pycomm.world()
        self.gloo = None
        if gloo_port is not None:
            import torch.distributed as dist

            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{gloo_port}", rank=self.mpi.rank, world_size=self.mpi.size
            )
            self.gloo = dist

    def allreduce(self, peer: str, t: torch.Tensor) -> Callable[[], Any]:
        from mpi4py import MPI

        if peer == "pycomm":
            return lambda: self.comm.allreduce(t, op=pycomm.SUM)
        if peer == "mpi4py":
            arr = t.numpy()
            return lambda: self.mpi.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM)
        return lambda: self.gloo.all_reduce(t)

    def close(self) -> None:
        if self.gloo is not None:
            self.gloo.destroy_process_group()


def sizes(quick: bool, max_bytes: int) -> list[int]:
    top = min(max_bytes, 1 * MIB if quick else 256 * MIB)
    step = 16 if quick else 4
    out, s = [], 4 * KIB
    while s <= top:
        out.append(s)
        s *= step
    return out


def section_busbw(peers: Peers, quick: bool, max_bytes: int) -> list[dict]:
    n, rows = peers.mpi.size, []
    for nbytes in sizes(quick, max_bytes):
        t = torch.zeros(nbytes // 4)  # zeros: repeated SUMs stay finite and never denormal
        repeats = 3 if quick else (5 if nbytes >= 64 * MIB else 11)
        peer_names = ("pycomm", "mpi4py", "gloo")
        times = timed({p: peers.allreduce(p, t) for p in peer_names}, peers.mpi, repeats)
        for peer in peer_names:
            tm = times[peer]
            rows.append(
                {
                    "ranks": n,
                    "peer": peer,
                    "bytes": nbytes,
                    "seconds": tm,
                    "busbw_GBs": busbw_gbs("allreduce", nbytes, tm["median"], n),
                }
            )
        del t
    return rows


def section_fusion(peers: Peers, quick: bool) -> list[dict]:
    """ResNet-50's gradients: per tensor (pycomm, gloo), fused (allreduce_coalesced), one flat buffer."""
    from mpi4py import MPI

    shapes = resnet50_shapes()
    grads = [torch.zeros(s) for s in shapes]
    flat = torch.zeros(sum(g.numel() for g in grads))
    comm, repeats = peers.comm, 3 if quick else 11  # 4 ranks on 2 cores: flat mpi4py spans 0.1-0.23 s

    def per_tensor_pycomm() -> None:
        for w in [comm.allreduce(g, op=pycomm.SUM, async_op=True) for g in grads]:
            w.wait()

    def per_tensor_pycomm_blocking() -> None:  # each a blocking op, on the caller's thread
        for g in grads:
            comm.allreduce(g, op=pycomm.SUM)

    def per_tensor_gloo() -> None:
        for w in [peers.gloo.all_reduce(g, async_op=True) for g in grads]:
            w.wait()

    cases = {
        "per_tensor_pycomm": per_tensor_pycomm,
        "per_tensor_pycomm_blocking": per_tensor_pycomm_blocking,
        "per_tensor_gloo": per_tensor_gloo,
        # the default: 4 MiB buckets for host tensors (they stay in the last-level cache)
        "coalesced_pycomm": lambda: comm.allreduce_coalesced(grads, op=pycomm.SUM, async_op=True).wait(),
        # the GPU default (DDP's bucket size), for comparison
        "coalesced_pycomm_25MiB": lambda: comm.allreduce_coalesced(
            grads, op=pycomm.SUM, bucket_bytes=25 << 20, async_op=True
        ).wait(),
        "coalesced_pycomm_bf16": lambda: comm.allreduce_coalesced(
            grads, op=pycomm.SUM, wire_dtype=torch.bfloat16, async_op=True
        ).wait(),
        "flat_mpi4py": lambda: peers.mpi.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM),
    }
    times = timed(cases, peers.mpi, repeats, warmup=1)
    return [
        {
            "ranks": peers.mpi.size,
            "case": name,
            "tensors": len(grads),
            "bytes": flat.numel() * 4,
            "seconds": times[name],
        }
        for name in cases
    ]


def section_shards(peers: Peers, quick: bool, max_bytes: int) -> list[dict]:
    """ZeRO's collectives: reduce_scatter_coalesced / allgather_coalesced of 16 tensors (a unit's
    gradients or parameters) against mpi4py's Reduce_scatter_block / Allgather and pycomm's own
    reduce_scatter / allgather, both on one flat buffer of the same bytes. The 16 tensors are views of
    one buffer (as ZeRO lays out its flat parameters: no copy) or 16 separate tensors (packed)."""
    from mpi4py import MPI

    comm, n, rows = peers.comm, peers.mpi.size, []
    for nbytes in [s for s in sizes(quick, max_bytes) if s >= 64 * KIB]:
        numel = nbytes // 4 // n * n
        flat = torch.zeros(numel)
        tensors = list(torch.zeros(numel).chunk(16))  # views of one buffer: the zero-copy path
        separate = [t.clone() for t in tensors]  # 16 allocations: packed into bucket buffers
        shard = torch.zeros(pycomm.flat_shard_numel(tensors, n))
        out_flat = torch.zeros(numel)
        arr, shard_arr, out_arr = flat.numpy(), shard.numpy(), out_flat.numpy()
        cases = {
            ("reduce_scatter", "pycomm_coalesced"): lambda: comm.reduce_scatter_coalesced(
                shard, tensors, op=pycomm.SUM, async_op=True
            ).wait(),
            ("reduce_scatter", "pycomm_coalesced_separate"): lambda: comm.reduce_scatter_coalesced(
                shard, separate, op=pycomm.SUM, async_op=True
            ).wait(),
            ("reduce_scatter", "pycomm_flat"): lambda: comm.reduce_scatter(shard, flat, op=pycomm.SUM),
            ("reduce_scatter", "mpi4py"): lambda: peers.mpi.Reduce_scatter_block(arr, shard_arr, op=MPI.SUM),
            ("allgather", "pycomm_coalesced"): lambda: comm.allgather_coalesced(tensors, shard, async_op=True).wait(),
            ("allgather", "pycomm_coalesced_separate"): lambda: comm.allgather_coalesced(
                separate, shard, async_op=True
            ).wait(),
            ("allgather", "pycomm_flat"): lambda: comm.allgather(out_flat, shard),
            ("allgather", "mpi4py"): lambda: peers.mpi.Allgather(shard_arr, out_arr),
        }
        times = timed(
            {f"{op}/{peer}": fn for (op, peer), fn in cases.items()},
            peers.mpi,
            3 if quick else (5 if nbytes >= 64 * MIB else 9),
            warmup=1,
        )
        for op, peer in cases:
            tm = times[f"{op}/{peer}"]
            rows.append(
                {
                    "ranks": n,
                    "op": op,
                    "peer": peer,
                    "bytes": numel * 4,
                    "seconds": tm,
                    "busbw_GBs": busbw_gbs(op, numel * 4, tm["median"], n),
                }
            )
        flat = tensors = separate = out_flat = None  # freed before the next size's (held by the cases too)
    return rows


def section_small(
    peers: Peers,
    quick: bool,
    max_bytes: int,
    sample_s: float = 5e-3,
    pages: tuple[str, ...] = ("4k",),
    patterns: tuple[str, ...] = ("back_to_back",),
    size_list: list[int] | None = None,
    eager_limits: tuple[int, ...] = (),
) -> list[dict]:
    """The four small-message collectives against mpi4py on the same buffers from 4 KiB, in the same processes:
    all-reduce (pycomm's own, on the caller's thread), broadcast, all-gather and reduce-scatter (MPI's,
    on the progress thread). `bytes` is the all-reduce / broadcast buffer and the gathered or scattered
    whole; busbw per nccl-tests. `pages`: the buffers' page kinds, each kind's cases timed interleaved
    with the others' in the same rounds; `huge_page_bytes` is what the kernel gave the whole buffer.
    `patterns`: "back_to_back" (calls batched, `timed`) and/or "isolated" (a barrier before each call,
    `isolated`); `size_list`: the sizes instead of `sizes`'. `eager_limits`: pycomm's cases once per
    PYCOMM_EAGER_BYTES value, each on a communicator made with it, all timed interleaved in the same
    rounds (rows carry `eager_bytes`; mpi4py's rows are repeated for each)."""
    from mpi4py import MPI

    n, rows = peers.mpi.size, []
    comms = {limit: _with_eager_limit(peers.comm, limit) for limit in eager_limits} or {None: peers.comm}
    for nbytes in size_list if size_list is not None else sizes(quick, max_bytes):
        numel = nbytes // 4 // n * n
        cases, huge = {}, {}
        for kind in pages:
            full, shard = host_zeros(numel, kind), host_zeros(numel // n, kind)
            arr, shard_arr = full.numpy(), shard.numpy()
            huge[kind] = hugepages.backed_bytes(full)
            cases.update(
                {
                    ("allreduce", "mpi4py", kind): lambda a=arr: peers.mpi.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM),
                    ("broadcast", "mpi4py", kind): lambda a=arr: peers.mpi.Bcast(a, root=0),
                    ("allgather", "mpi4py", kind): lambda a=arr, h=shard_arr: peers.mpi.Allgather(h, a),
                    ("reduce_scatter", "mpi4py", kind): lambda a=arr, h=shard_arr: peers.mpi.Reduce_scatter_block(
                        a, h, op=MPI.SUM
                    ),
                }
            )
            for limit, comm in comms.items():
                mine = "pycomm" if limit is None else f"pycomm@{limit}"
                cases.update(
                    {
                        ("allreduce", mine, kind): lambda f=full, c=comm: c.allreduce(f, op=pycomm.SUM),
                        ("broadcast", mine, kind): lambda f=full, c=comm: c.broadcast(f, root=0),
                        ("allgather", mine, kind): lambda f=full, h=shard, c=comm: c.allgather(f, h),
                        ("reduce_scatter", mine, kind): lambda f=full, h=shard, c=comm: c.reduce_scatter(
                            h, f, op=pycomm.SUM
                        ),
                    }
                )
        named = {"/".join(k): fn for k, fn in cases.items()}
        for pattern in patterns:
            if pattern == "isolated":
                times = isolated(named, peers.mpi, 20 if quick else 200)
            else:
                times = timed(
                    named, peers.mpi, 3 if quick else (5 if nbytes >= 16 * MIB else 9), warmup=2, sample_s=sample_s
                )
            for op, peer, kind in cases:
                tm = times[f"{op}/{peer}/{kind}"]
                row = {
                    "ranks": n,
                    "op": op,
                    "peer": peer,
                    "bytes": numel * 4,
                    "pages": kind,
                    "pattern": pattern,
                    "seconds": tm,
                    "busbw_GBs": busbw_gbs(op, numel * 4, tm["median"], n),
                    "huge_page_bytes": huge[kind],
                }
                if eager_limits and peer == "mpi4py":
                    rows += [{**row, "eager_bytes": limit} for limit in eager_limits]
                elif eager_limits:
                    rows.append({**row, "peer": "pycomm", "eager_bytes": int(peer.split("@")[1])})
                else:
                    rows.append(row)
        del cases, named
    return rows


def _with_eager_limit(world: pycomm.Communicator, limit: int) -> pycomm.Communicator:
    """A communicator over `world`'s ranks made with PYCOMM_EAGER_BYTES=limit (fixed for it when made)."""
    before = os.environ.get("PYCOMM_EAGER_BYTES")
    os.environ["PYCOMM_EAGER_BYTES"] = str(limit)
    try:
        return world.dup()
    finally:
        if before is None:
            del os.environ["PYCOMM_EAGER_BYTES"]
        else:
            os.environ["PYCOMM_EAGER_BYTES"] = before


def _bus_bytes() -> float:
    """Bytes this rank has put on the wire (nccl-tests bus bytes: busbw * seconds) over all ops."""
    return sum(c["busbw"] * c["seconds"] for c in pycomm.stats().values())


def section_quantized(peers: Peers, quick: bool, max_bytes: int) -> list[dict]:
    """fp32 all-reduce vs int8 and 1-bit quantized all-reduce: bytes each rank sends, time, and where a
    quantized call's time goes (pycomm._quantized_phases: encode, wire waits, reduce, decode)."""
    comm, rows = peers.comm, []
    top = min(max_bytes, 16 * MIB if quick else 256 * MIB)
    nbytes = 16 * MIB
    while nbytes <= top:
        t = torch.randn(nbytes // 4)
        cases = {
            "fp32": lambda: comm.allreduce(t, op=pycomm.AVG),
            "int8": lambda: comm.allreduce_quantized(
                t, codec=pycomm.Int8Codec(block=256), op=pycomm.AVG, async_op=True
            ).wait(),
            "1bit": lambda: comm.allreduce_quantized(
                t, codec=pycomm.OneBitCodec(block=256), error_feedback=ef, op=pycomm.AVG, async_op=True
            ).wait(),
        }
        ef = pycomm.ErrorFeedback()
        sent = {}
        for name, fn in cases.items():
            before = _bus_bytes()
            fn()
            sent[name] = _bus_bytes() - before
        times = timed(cases, peers.mpi, 3 if quick else 5, warmup=1)
        for name in cases:
            rows.append(
                {
                    "ranks": peers.mpi.size,
                    "codec": name,
                    "bytes": nbytes,
                    "bytes_sent_per_rank": sent[name],
                    "seconds": times[name],
                    **(_phases(cases[name], peers.mpi, 1 if quick else 3) if name != "fp32" else {}),
                }
            )
        del t
        nbytes *= 4
    return rows


def _phases(fn: Callable[[], Any], mpi_comm: Any, calls: int) -> dict:
    """Per-phase seconds per call (each phase: the slowest rank's mean over `calls`), and the timeline of
    the last call: every rank's (segment, phase, start ms, duration ms) from the call's start."""
    from pycomm._quantized_phases import profile_phases

    with profile_phases() as log:
        for _ in range(calls):
            mpi_comm.Barrier()
            t0 = time.perf_counter()
            fn()
    per_call = {k: v / calls for k, v in log.totals().items()}
    slowest = {k: mpi_comm.allreduce(v, op=_mpi_max()) for k, v in per_call.items()}
    last = [
        (seg, phase, round((a - t0) * 1e3, 2), round((b - a) * 1e3, 2))
        for call, seg, phase, a, b in log.rows
        if call == log.calls - 1
    ]
    return {"phase_seconds": slowest, "timeline_ms": mpi_comm.gather(last)}


def _mpi_max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--section", choices=("busbw", "fusion", "quantized", "shards", "small"), required=True
    )  # shaped: "quantized" in a namespace
    ap.add_argument("--out", required=True)
    ap.add_argument("--gloo-port", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-bytes", type=int, default=256 * MIB)
    ap.add_argument("--sample-s", type=float, default=5e-3, help="small: shortest timed sample (calls batched)")
    ap.add_argument("--pages", default="4k", help="small: comma-separated page kinds of the buffers (4k, huge)")
    ap.add_argument(
        "--patterns", default="back_to_back", help="small: comma-separated call patterns (back_to_back, isolated)"
    )
    ap.add_argument("--sizes", help="small: comma-separated byte sizes instead of 4 KiB x4 up to --max-bytes")
    ap.add_argument("--eager-limits", help="small: comma-separated PYCOMM_EAGER_BYTES values, pycomm's cases on each")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pycomm.init()
    peers = Peers(args.gloo_port)
    if args.section == "busbw":
        rows = section_busbw(peers, args.quick, args.max_bytes)
    elif args.section == "fusion":
        rows = section_fusion(peers, args.quick)
    elif args.section == "small":
        rows = section_small(
            peers,
            args.quick,
            args.max_bytes,
            args.sample_s,
            tuple(args.pages.split(",")),
            tuple(args.patterns.split(",")),
            [int(b) for b in args.sizes.split(",")] if args.sizes else None,
            tuple(int(b) for b in args.eager_limits.split(",")) if args.eager_limits else (),
        )
    elif args.section == "shards":
        rows = section_shards(peers, args.quick, args.max_bytes)
    else:
        rows = section_quantized(peers, args.quick, args.max_bytes)
    if peers.mpi.rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    peers.close()


if __name__ == "__main__":
    main()
