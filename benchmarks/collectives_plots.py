"""The plots of benchmarks/collectives.py: each `plot_*` returns a draw function for harness.save
(with a `panels` attribute where it draws more than one panel)."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.collectives_common import (
    EAGER_LIMITS,
    EAGER_OPS,
    HUGEPAGES_LOAD,
    KIB,
    MIB,
    PATTERNS,
    SHAPED_RATE,
    mpi4py_ratios,
)


def plot_eager(rows: list[dict]):
    """mpi4py time / pycomm time per size for each eager limit (geometric mean over broadcast, all-gather
    and reduce-scatter), a panel per call pattern; 2 ranks solid, 4 dashed."""

    def draw(axes: Any) -> None:
        ratios = mpi4py_ratios(rows, ("eager_bytes", "pattern", "ranks", "op", "bytes"))
        for ax, pattern in zip(axes, PATTERNS):
            for limit, n in sorted({(k[0], k[2]) for k in ratios if k[1] == pattern}):
                sizes = sorted({k[4] for k in ratios if k[:3] == (limit, pattern, n)})
                means = [
                    math.exp(sum(math.log(ratios[(limit, pattern, n, op, b)]) for op in EAGER_OPS) / len(EAGER_OPS))
                    for b in sizes
                ]
                ax.plot(
                    sizes,
                    means,
                    marker="o",
                    linestyle="-" if n == 2 else "--",
                    color=f"C{EAGER_LIMITS.index(limit) if limit in EAGER_LIMITS else 9}",
                    label=f"limit {limit // KIB} KiB, {n} ranks",
                )
            ax.axhline(0.9, color="grey", linewidth=1, linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("mpi4py time / pycomm time (geomean of 3 collectives)")
            ax.set_title(f"PYCOMM_EAGER_BYTES, {pattern.replace('_', ' ')} calls")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6, ncol=2)

    draw.panels = len(PATTERNS)  # type: ignore[attr-defined]
    return draw


def plot_plain(rows: list[dict]):
    """mpi4py time / pycomm time per collective under a plain mpirun: a panel per call pattern."""

    def draw(axes: Any) -> None:
        colors = {
            "allreduce": "tab:blue",
            "broadcast": "tab:green",
            "allgather": "tab:red",
            "reduce_scatter": "tab:purple",
        }
        by = {(r["pattern"], r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
        for ax, pattern in zip(axes, PATTERNS):
            for n, op in sorted({(k[1], k[2]) for k in by if k[0] == pattern}):
                sizes = sorted(k[4] for k in by if k[:4] == (pattern, n, op, "pycomm"))
                ax.plot(
                    sizes,
                    [by[(pattern, n, op, "mpi4py", b)] / by[(pattern, n, op, "pycomm", b)] for b in sizes],
                    marker="o",
                    color=colors[op],
                    linestyle="-" if n == 2 else "--",
                    label=f"{op}, {n} ranks",
                )
            ax.axhline(0.9, color="grey", linewidth=1, linestyle=":")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("mpi4py time / pycomm time (same run)")
            ax.set_title(f"plain mpirun, {pattern.replace('_', ' ')} calls (goal 0.9)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6, ncol=2)

    draw.panels = len(PATTERNS)  # type: ignore[attr-defined]
    return draw


def plot_busbw(rows: list[dict]):
    def draw(ax: Any) -> None:
        lines: dict[tuple[int, str], list[tuple[int, float]]] = {}
        for r in rows:
            lines.setdefault((r["ranks"], r["peer"]), []).append((r["bytes"], r["busbw_GBs"]))
        for (n, peer), pts in sorted(lines.items()):
            pts.sort()
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                label=f"{peer}, {n} ranks",
                linestyle="-" if n == min(k[0] for k in lines) else "--",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("all-reduce busbw (GB/s, nccl-tests definition)")
        ax.set_title("all-reduce bus bandwidth (CPU, shared machine)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()

    return draw


def plot_codec_time(rows: list[dict]):
    """Quantized all-reduce time as a fraction of fp32's (same size, same run) on the shaped link, and
    (inset) where a 64 MiB call's time goes, per phase (the slowest rank's)."""

    def draw(ax: Any) -> None:
        by = {(r["ranks"], r["codec"], r["bytes"]): r["seconds"]["median"] for r in rows}
        for codec, color in (("int8", "tab:blue"), ("1bit", "tab:red")):
            for n in sorted({k[0] for k in by}):
                sizes = sorted(b for (m, c, b) in by if (m, c) == (n, codec))
                ax.plot(
                    sizes,
                    [by[(n, codec, b)] / by[(n, "fp32", b)] for b in sizes],
                    marker="o",
                    color=color,
                    linestyle="-" if n == 2 else "--",
                    label=f"{codec}, {n} ranks",
                )
        ax.axhline(0.4, color="tab:blue", linewidth=1, linestyle=":")
        ax.axhline(0.15, color="tab:red", linewidth=1, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("time / fp32 all-reduce time")
        quantized = [by[k] / by[(k[0], "fp32", k[2])] for k in by if k[1] != "fp32"]
        ax.set_ylim(0, max(0.9, 2.0 * max(quantized, default=0.0)))  # the upper half holds the inset
        ax.set_title(f"quantized all-reduce on a {SHAPED_RATE} link (tc tbf; goals dotted)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        profiled = [r for r in rows if "phase_seconds" in r and r["bytes"] == 64 * MIB]
        if profiled:
            inset = ax.inset_axes([0.5, 0.56, 0.48, 0.4])
            where = list(range(len(profiled)))
            bottom = [0.0] * len(profiled)
            for phase in profiled[0]["phase_seconds"]:
                ms = [r["phase_seconds"][phase] * 1e3 for r in profiled]
                inset.bar(where, ms, bottom=bottom, label=phase)
                bottom = [b + m for b, m in zip(bottom, ms)]
            inset.set_xticks(where, [f"{r['codec']} {r['ranks']}r" for r in profiled])
            inset.set_ylabel("ms per call (64 MiB)", fontsize=7)
            inset.tick_params(labelsize=6)
            inset.legend(fontsize=5)

    return draw


def plot_shards(rows: list[dict]):
    """busbw of the coalesced ops as a ratio of mpi4py's on the same bytes (goal 0.9 from 1 MiB)."""

    def draw(ax: Any) -> None:
        by = {(r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
        colors = {
            ("reduce_scatter", "pycomm_coalesced"): "tab:blue",
            ("reduce_scatter", "pycomm_coalesced_separate"): "tab:cyan",
            ("allgather", "pycomm_coalesced"): "tab:red",
            ("allgather", "pycomm_coalesced_separate"): "tab:orange",
        }
        for (op, peer), color in colors.items():
            for n in sorted({k[0] for k in by}):
                sizes = sorted(b for (m, o, p, b) in by if (m, o, p) == (n, op, peer))
                ratios = [by[(n, op, "mpi4py", b)] / by[(n, op, peer, b)] for b in sizes]
                label = f"{op} {'separate tensors' if peer.endswith('separate') else 'one buffer'}, {n} ranks"
                ax.plot(sizes, ratios, marker="o", color=color, linestyle="-" if n == 2 else "--", label=label)
        ax.axhline(0.9, color="grey", linewidth=1, linestyle=":")
        ax.axvline(MIB, color="grey", linewidth=1, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes over all ranks' shards")
        ax.set_ylabel("busbw / mpi4py busbw (same bytes, same run)")
        ax.set_title("coalesced reduce-scatter / all-gather against mpi4py (goal 0.9 from 1 MiB)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

    return draw


def plot_small(rows: list[dict]):
    """pycomm's time advantage over mpi4py (mpi4py time / pycomm time) per collective, idle and busy."""

    def draw(ax: Any) -> None:
        by = {(r["load"], r["ranks"], r["op"], r["peer"], r["bytes"]): r["seconds"]["median"] for r in rows}
        colors = {
            "allreduce": "tab:blue",
            "broadcast": "tab:green",
            "allgather": "tab:red",
            "reduce_scatter": "tab:purple",
        }
        for load, n, op in sorted({k[:3] for k in by}):
            sizes = sorted(k[4] for k in by if k[:4] == (load, n, op, "pycomm"))
            ax.plot(
                sizes,
                [by[(load, n, op, "mpi4py", b)] / by[(load, n, op, "pycomm", b)] for b in sizes],
                marker={"idle": "o", HUGEPAGES_LOAD: "s"}.get(load, "x"),
                color=colors[op],
                linestyle="-" if n == 2 else "--",
                alpha=1.0 if load == "idle" else 0.6,
                label=f"{op}, {n} ranks, {load}",
            )
        ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("mpi4py time / pycomm time (same run)")
        ax.set_title("collectives against mpi4py: idle, every core busy, huge pages (goal 1.0)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)

    return draw
