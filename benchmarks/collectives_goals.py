"""The goals of benchmarks/collectives.py as measured ratios (median times of the same run), and the
summaries stored beside them (eager_summary, hugepage_speedup)."""

from __future__ import annotations

import math

from benchmarks.collectives_common import (
    EAGER_OPS,
    MIB,
    PAIRED_LOAD,
    SHAPED_BYTES_PER_S,
    SHAPED_RATE,
    SMALL_SECTIONS,
    mpi4py_ratios,
)


def shaped_goals(rows: list[dict]) -> list[dict]:
    """On the shaped 10 Gbit/s link the codec must pay: int8 <= 0.4x and 1-bit <= 0.15x fp32's time."""
    q = {(r["ranks"], r["codec"], r["bytes"]): r["seconds"]["median"] for r in rows}
    limits = {"int8": 0.4, "1bit": 0.15}
    return [
        {
            "goal": f"{codec} time <= {limits[codec]}x fp32 at {SHAPED_RATE}",
            "ranks": n,
            "bytes": nbytes,
            "ratio": sec / q[(n, "fp32", nbytes)],
            "met": sec / q[(n, "fp32", nbytes)] <= limits[codec],
        }
        for (n, codec, nbytes), sec in sorted(q.items())
        if codec in limits
    ]


def link_floor(rows: list[dict]) -> None:
    """Adds to each shaped row the time its traffic needs at the shaped rate alone (every rank's bytes
    pass the one token bucket) and measured / that: ~1 when the link is the bottleneck."""
    for r in rows:
        r["link_floor_s"] = r["ranks"] * r["bytes_sent_per_rank"] / SHAPED_BYTES_PER_S
        r["vs_link_floor"] = r["seconds"]["median"] / r["link_floor_s"] if r["link_floor_s"] else None


def shard_goals(rows: list[dict]) -> list[dict]:
    """Coalesced reduce-scatter / all-gather busbw against mpi4py's on the same bytes (goal >= 0.9x at
    >= 1 MiB), and against pycomm's own collective on one flat buffer."""
    by = {(r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
    out = []
    for (n, op, peer, nbytes), sec in sorted(by.items()):
        if peer != "pycomm_coalesced":
            continue
        ratio = by[(n, op, "mpi4py", nbytes)] / sec
        separate = by[(n, op, "mpi4py", nbytes)] / by[(n, op, "pycomm_coalesced_separate", nbytes)]
        out.append(
            {
                "goal": f"{op}_coalesced busbw vs mpi4py >= 0.9 (>= 1 MiB)",
                "ranks": n,
                "bytes": nbytes,
                "ratio": ratio,
                "separate_tensors_ratio": separate,
                "met": ratio >= 0.9 if nbytes >= MIB else None,
            }
        )
    return out


def small_goals(rows: list[dict]) -> list[dict]:
    """The small-message goal: busbw >= 1.0x mpi4py's for all-reduce at every size, the other three from
    1 MiB, idle and busy."""
    by = {(r["load"], r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
    out = []
    for (load, n, op, peer, nbytes), sec in sorted(by.items()):
        if peer != "pycomm":
            continue
        ratio = by[(load, n, op, "mpi4py", nbytes)] / sec
        applies = op == "allreduce" or nbytes >= MIB
        out.append(
            {
                "goal": f"{op} busbw vs mpi4py >= 1.0 ({load})",
                "ranks": n,
                "bytes": nbytes,
                "ratio": ratio,
                "met": ratio >= 1.0 if applies else None,
            }
        )
    return out


def plain_goals(rows: list[dict]) -> list[dict]:
    """Under a plain mpirun: every collective >= 0.9x mpi4py's speed at every size, in both call patterns."""
    by = {(r["pattern"], r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
    out = []
    for (pattern, n, op, peer, nbytes), sec in sorted(by.items()):
        if peer == "pycomm":
            ratio = by[(pattern, n, op, "mpi4py", nbytes)] / sec
            out.append(
                {
                    "goal": f"{op} vs mpi4py >= 0.9 (plain mpirun, {pattern})",
                    "ranks": n,
                    "bytes": nbytes,
                    "ratio": ratio,
                    "met": ratio >= 0.9,
                }
            )
    return out


def eager_summary(rows: list[dict]) -> list[dict]:
    """Per eager limit, call pattern and rank count: the geometric mean and the lowest of mpi4py time /
    pycomm time over the collectives the limit decides for and the sizes measured."""
    ratios = mpi4py_ratios(rows, ("eager_bytes", "pattern", "ranks", "op", "bytes"))
    out = []
    for limit, pattern, n in sorted({k[:3] for k in ratios}):
        vals = [v for k, v in ratios.items() if k[:3] == (limit, pattern, n) and k[3] in EAGER_OPS]
        out.append(
            {
                "eager_bytes": limit,
                "pattern": pattern,
                "ranks": n,
                "geomean_ratio": math.exp(sum(map(math.log, vals)) / len(vals)),
                "lowest_ratio": min(vals),
            }
        )
    return out


def hugepage_speedup(rows: list[dict]) -> list[dict]:
    """Each peer's time on 4 KiB pages over its time on huge pages, from small_hugepages' rows (both
    kinds timed interleaved in the same rounds)."""
    on_huge = {
        (r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows if r["pages"] == "huge"
    }
    return [
        {
            "ranks": r["ranks"],
            "op": r["op"],
            "peer": r["peer"],
            "bytes": r["bytes"],
            "speedup": r["seconds"]["median"] / on_huge[key],
        }
        for r in rows
        if r["pages"] == "4k" and (key := (r["ranks"], r["op"], r["peer"], r["bytes"])) in on_huge
    ]


def measured_small(rows: dict[str, list[dict]]) -> list[dict]:
    """The small sections' rows that the goals and the plot read (not small_hugepages' paired 4 KiB ones)."""
    return [r for s in SMALL_SECTIONS for r in rows[s] if r["load"] != PAIRED_LOAD]


def goals(rows: dict[str, list[dict]]) -> list[dict]:
    """The goals as measured ratios (median times of the same run)."""
    out = shard_goals(rows["shards"]) if rows.get("shards") else []
    out += small_goals(measured_small(rows))
    out += plain_goals(rows["plain"]) if rows.get("plain") else []
    out += shaped_goals(rows["quantized_shaped"]) if rows.get("quantized_shaped") else []
    by = {(r["ranks"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows.get("busbw", [])}
    for (n, peer, nbytes), sec in sorted(by.items()):
        if peer != "pycomm":
            continue
        speed_vs_mpi = by[(n, "mpi4py", nbytes)] / sec
        speed_vs_gloo = by[(n, "gloo", nbytes)] / sec
        out.append(
            {
                "goal": "busbw vs mpi4py >= 0.9 (>= 1 MiB)",
                "ranks": n,
                "bytes": nbytes,
                "ratio": speed_vs_mpi,
                "met": speed_vs_mpi >= 0.9 if nbytes >= MIB else None,
            }
        )
        out.append(
            {
                "goal": "busbw vs gloo >= 1",
                "ranks": n,
                "bytes": nbytes,
                "ratio": speed_vs_gloo,
                "met": speed_vs_gloo >= 1.0,
            }
        )
    fus = {(r["ranks"], r["case"]): r["seconds"]["median"] for r in rows.get("fusion", [])}
    for n in sorted({r["ranks"] for r in rows.get("fusion", [])}):
        co = fus[(n, "coalesced_pycomm")]
        flat_ratio = fus[(n, "flat_mpi4py")] / co
        gloo_ratio = fus[(n, "per_tensor_gloo")] / co
        out.append(
            {
                "goal": "coalesced (defaults) time <= 0.7x flat mpi4py",
                "ranks": n,
                "ratio": co / fus[(n, "flat_mpi4py")],
                "met": flat_ratio >= 1 / 0.7,
            }
        )
        out.append(
            {
                "goal": "coalesced (defaults) >= 3x faster than per-tensor gloo",
                "ranks": n,
                "ratio": gloo_ratio,
                "met": gloo_ratio >= 3.0,
            }
        )
    q = {(r["ranks"], r["codec"], r["bytes"]): r for r in rows.get("quantized", [])}
    for (n, codec, nbytes), r in sorted(q.items()):
        if codec == "fp32":
            continue
        fp32 = q[(n, "fp32", nbytes)]
        byte_ratio = r["bytes_sent_per_rank"] / fp32["bytes_sent_per_rank"] if fp32["bytes_sent_per_rank"] else None
        limit = 0.3 if codec == "int8" else 0.05
        out.append(
            {
                "goal": f"{codec} bytes <= {limit}x fp32",
                "ranks": n,
                "bytes": nbytes,
                "ratio": byte_ratio,
                "met": byte_ratio is not None and byte_ratio <= limit,
            }
        )
        if codec == "int8":
            time_ratio = r["seconds"]["median"] / fp32["seconds"]["median"]
            out.append(
                {
                    "goal": "int8 time <= 0.6x fp32 on tcp",
                    "ranks": n,
                    "bytes": nbytes,
                    "ratio": time_ratio,
                    "met": time_ratio <= 0.6,
                }
            )
    return out
