"""Roofline of the quantized all-reduce on the CPU: the bytes each phase of allreduce_quantized must move
through memory per rank (pycomm/_quantized_pipeline.py's passes, counted from what each kernel reads and
writes), this machine's measured memory bandwidth (one process, and one per core at once, as the ranks
run), and the fastest time that allows, beside the link floor. `python -m benchmarks.codec_roofline`
prints it; benchmarks/collectives.py stores it with the shaped-link rows."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time

MIB = 1 << 20
WIRE_BYTES_PER_ELEMENT = {"int8": 1.0 + 4 / 256, "1bit": 1 / 8 + 4 / 256}  # block 256


def phase_bytes(codec: str, nbytes: int, ranks: int, error_feedback: bool) -> dict[str, float]:
    """Memory bytes per rank of each compute phase for an fp32 tensor of `nbytes` (residual writes are
    counted; the own-chunk residual is zero after the first call, so it is read and not written)."""
    s, n = float(nbytes), ranks
    w = WIRE_BYTES_PER_ELEMENT[codec] / 4  # encoded bytes per fp32 byte
    others, own = s * (n - 1) / n, s / n
    encode = others + others * w + (2 * others if error_feedback else 0)  # x (+ residual r/w) -> wire
    reduce = own + (n - 1) * own * w + own * w + own + (3 * own if error_feedback else 0)  # own x, sources,
    # re-encoding, own decode written back into t, (own residual read, server residual r/w)
    decode = others * w + others  # other slots -> t
    return {"encode": encode, "reduce_reencode": reduce, "decode": decode}


def _bandwidth_one(_: int = 0) -> dict[str, float]:
    """GB/s of one thread on 64 MiB arrays (beyond the per-core caches): read, write, and read-modify-write
    with a second read stream (a += b, the residual update's pattern)."""
    import torch

    torch.set_num_threads(1)
    n = 64 * MIB // 4
    a, b, c = torch.randn(n), torch.randn(n), torch.empty(n)

    def median_s(f) -> float:
        f()
        ts = []
        for _ in range(9):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return sorted(ts)[len(ts) // 2]

    size = n * 4
    return {
        "read": size / median_s(lambda: a.sum()) / 1e9,
        "write": size / median_s(lambda: c.fill_(1.0)) / 1e9,
        "read_modify_write": 3 * size / median_s(lambda: a.add_(b)) / 1e9,
    }


def bandwidth() -> dict[str, dict[str, float]]:
    """Per-process GB/s with one process running, and with one per core running at once (the mean)."""
    cores = len(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        one = pool.map(_bandwidth_one, [0])[0]
    with ctx.Pool(cores) as pool:
        each = pool.map(_bandwidth_one, range(cores))
    per_core = {k: sum(e[k] for e in each) / len(each) for k in one}
    return {"one_process": one, f"each_of_{cores}_processes": per_core}


NOTE = (
    "roofline: memory_floor_s = the phases' bytes per rank (phase_mib_per_rank, from what each kernel reads "
    "and writes) at the read-modify-write bandwidth measured with one process per core running at once, "
    "during this run (so under the same load); link_floor_s = every rank's bytes through the one token "
    "bucket; floor_ratio_overlapped = max of the two / fp32's time (encode and decode hidden behind the "
    "wire), floor_ratio_serial = their sum / fp32's time (no overlap)"
)


def roofline(rows: list[dict], bw: dict[str, dict[str, float]], link_bytes_per_s: float) -> list[dict]:
    """For each quantized row (ranks, codec, bytes; fp32 rows give the ratio's denominator): the memory
    floor (all phases' bytes at the concurrent per-process bandwidth, every rank sharing the cores), the
    link floor, their sum (no overlap) and max (perfect overlap), and those as ratios of fp32's time."""
    fp32 = {(r["ranks"], r["bytes"]): r["seconds"]["median"] for r in rows if r["codec"] == "fp32"}
    cores = len(os.sched_getaffinity(0))
    out = []
    for r in rows:
        if r["codec"] == "fp32":
            continue
        n = r["ranks"]
        per_rank_gbs = next(iter(bw.values()))["read"] if n == 1 else list(bw.values())[1]["read_modify_write"]
        share = min(1.0, cores / n)  # ranks beyond the cores share them
        phases = phase_bytes(r["codec"], r["bytes"], n, r["codec"] == "1bit")
        memory_s = sum(phases.values()) / (per_rank_gbs * 1e9 * share)
        link_s = n * r["bytes_sent_per_rank"] / link_bytes_per_s
        base = fp32[(n, r["bytes"])]
        out.append(
            {
                "ranks": n,
                "codec": r["codec"],
                "bytes": r["bytes"],
                "phase_mib_per_rank": {k: round(v / MIB, 1) for k, v in phases.items()},
                "memory_floor_s": memory_s,
                "link_floor_s": link_s,
                "floor_ratio_overlapped": max(memory_s, link_s) / base,
                "floor_ratio_serial": (memory_s + link_s) / base,
                "measured_ratio": r["seconds"]["median"] / base,
            }
        )
    return out


if __name__ == "__main__":
    print(json.dumps(bandwidth(), indent=1))
    for codec in ("int8", "1bit"):
        for n in (2, 4):
            print(codec, n, {k: round(v / MIB, 1) for k, v in phase_bytes(codec, 16 * MIB, n, codec == "1bit").items()})
