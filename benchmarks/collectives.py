"""Collectives benchmark: `python -m benchmarks.collectives [--ranks 2,4] [--quick]`.

Launches benchmarks/collectives_ranks.py under mpirun for every rank count and section, merges the
rows into benchmarks/results/collectives.json, draws busbw against size (a line per peer) and prints
the tables and the goals (`goals` below) as ratios against the peers measured in the same run:
  (a) busbw of pycomm allreduce vs mpi4py Allreduce vs torch.distributed gloo all_reduce;
  (b) ResNet-50's 161 gradients per tensor (pycomm, gloo), allreduce_coalesced, one flat mpi4py buffer;
  (c) int8 / 1-bit allreduce_quantized vs fp32 on a bandwidth-bound link (--mca btl self,tcp);
  (d) shards: reduce_scatter_coalesced / allgather_coalesced of 16 tensors vs mpi4py Reduce_scatter_block /
      Allgather on one flat buffer (ZeRO's collectives); `--sections shards --name collectives_shards`;
  (e) quantized_shaped: (c) on an emulated 10 Gbit/s link (benchmarks/shaped_link.py: a network
      namespace whose loopback is shaped by tc tbf; root only, skipped with the reason elsewhere);
      `--sections quantized_shaped --name collectives_shaped` (`--ranks 2 --merge`, then `--ranks 4 --merge`
      to split it); stored with its roofline (benchmarks/codec_roofline.py: memory bytes per phase against
      this machine's measured bandwidth, beside the link floor);
  (f) small: all-reduce, broadcast, all-gather, reduce-scatter vs mpi4py from 4 KiB, on the idle
      machine, and `small_busy`: the same with one busy-loop process pinned to each core beside the ranks
      (4 ranks on 2 cores are oversubscribed already; samples of at least 0.1 s there); `--sections
      small,small_busy,small_hugepages --name collectives_small`;
  (g) small_hugepages: (f) on the idle machine with both peers' buffers on transparent huge pages (advised
      before their first touch, as torch does with THP_MEM_ALLOC_ENABLE=1, which pycomm's launchers set;
      see pycomm/hugepages.py), timed interleaved with the same cases on 4 KiB pages, and each peer's time
      on 4 KiB pages over its time on huge ones (`hugepage_speedup`); skipped with the reason unless the
      kernel's transparent-huge-page policy is `madvise`. (f)'s sections run with THP_MEM_ALLOC_ENABLE=0,
      whatever the caller's environment.
  (h) plain: the four collectives against mpi4py under a plain `mpirun -n N` (Open MPI's default binding,
      not the launchers' --bind-to none), both call patterns: isolated (a barrier, then one call, as a
      training step makes it; 200 calls) and back to back (batched), sizes around the eager limit and up
      to --max-bytes; `--sections plain --name collectives_plain`;
  (i) eager: (h) from 4 to 64 KiB with pycomm's cases once per PYCOMM_EAGER_BYTES value of EAGER_LIMITS (each
      on a communicator made with it, all interleaved in the same rounds; broadcast, all-gather and
      reduce-scatter carry their data in op matching up to it): where the limit should sit;
      `--sections eager --name collectives_eager`."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from benchmarks import codec_roofline, shaped_link
from benchmarks.busy_load import busy_cores
from benchmarks.harness import RESULTS, save, table
from benchmarks.run_ranks import ROOT, free_port, mpirun_argv, worker_env
from pycomm import hugepages

SECTIONS = (
    "busbw",
    "fusion",
    "quantized",
    "shards",
    "quantized_shaped",
    "small",
    "small_busy",
    "small_hugepages",
    "plain",
    "eager",
)
SMALL_SECTIONS = ("small", "small_busy", "small_hugepages")
HUGEPAGES_LOAD = "idle, huge pages"
PAIRED_LOAD = "idle, 4 KiB pages beside huge"  # small_hugepages' own 4 KiB rows: only for hugepage_speedup
SMALL_PAGES = {hugepages.TORCH_ENV: "0"}  # torch's default: the user's tensors on 4 KiB pages
SHAPED_RATE = "10gbit"  # our users' CPU clusters and cross-node links run at 10-25 Gbit/s
SHAPED_BYTES_PER_S = 10e9 / 8
KIB, MIB = 1 << 10, 1 << 20
BUSY_SAMPLE_S = 0.1
PLAIN_LOAD = "plain mpirun"
PATTERNS = ("isolated", "back_to_back")
# plain's sizes: every 2x around the eager limit (where op matching carries the data), then every 4x
PLAIN_SIZES = (4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
PLAIN_QUICK_SIZES = (4 * KIB, 64 * KIB)
EAGER_LIMITS = (4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB)  # PYCOMM_EAGER_BYTES values the eager section tries


def run_section(section: str, ranks: int, quick: bool, max_bytes: int, timeout: float) -> list[dict]:
    if section == "small_busy":
        with busy_cores():
            # Samples of at least BUSY_SAMPLE_S (not in the --quick smoke run): a rank that loses its core
            # loses a whole time slice (4-8 ms here), so 5 ms samples measured the scheduler's luck
            # (ratios moved by 0.5 from run to run).
            extra = [] if quick else ["--sample-s", str(BUSY_SAMPLE_S)]
            rows = _run_ranks("small", ranks, quick, max_bytes, timeout, (), [], extra, SMALL_PAGES)
        return [{**r, "load": "busy"} for r in rows]
    if section == "plain":
        return _run_plain(
            ranks, quick, timeout, [b for b in (PLAIN_QUICK_SIZES if quick else PLAIN_SIZES) if b <= max_bytes]
        )
    if section == "eager":
        limits = EAGER_LIMITS[:2] if quick else EAGER_LIMITS
        return _run_plain(
            ranks,
            quick,
            timeout,
            [b for b in PLAIN_SIZES if b <= max(limits)],
            extra=["--eager-limits", ",".join(map(str, limits))],
        )
    if section == "small":
        rows = _run_ranks("small", ranks, quick, max_bytes, timeout, (), [], env=SMALL_PAGES)
        return [{**r, "load": "idle"} for r in rows]
    if section == "small_hugepages":
        if hugepages.policy() != "madvise":  # "always": the 4 KiB buffers would get huge pages too
            print(
                f"skipping {section}: the kernel's transparent-huge-page policy is {hugepages.policy()!r}, "
                "not 'madvise'",
                flush=True,
            )
            return []
        # PYCOMM_HUGEPAGES=1: the huge buffers' advice, whatever the caller set
        rows = _run_ranks(
            "small",
            ranks,
            quick,
            max_bytes,
            timeout,
            (),
            [],
            ["--pages", "4k,huge"],
            {**SMALL_PAGES, "PYCOMM_HUGEPAGES": "1"},
        )
        return [{**r, "load": HUGEPAGES_LOAD if r["pages"] == "huge" else PAIRED_LOAD} for r in rows]
    if section == "quantized_shaped":
        reason = shaped_link.unavailable()
        if reason is not None:
            print(f"skipping {section}: {reason}", flush=True)
            return []
        with shaped_link.shaped_namespace(SHAPED_RATE) as prefix:
            return _run_ranks("quantized", ranks, quick, max_bytes, timeout, shaped_link.TCP_OVER_LOOPBACK, prefix)
    mca = ("btl=self,tcp",) if section == "quantized" else ()
    return _run_ranks(section, ranks, quick, max_bytes, timeout, mca, [])


def _run_plain(ranks: int, quick: bool, timeout: float, sizes: list[int], extra: Sequence[str] = ()) -> list[dict]:
    """The four collectives against mpi4py at `sizes`, both call patterns, under a plain mpirun."""
    argv = ["--patterns", ",".join(PATTERNS), "--sizes", ",".join(map(str, sizes)), *extra]
    rows = _run_ranks("small", ranks, quick, max(sizes), timeout, (), [], argv, SMALL_PAGES, bind_to_none=False)
    return [{**r, "load": PLAIN_LOAD} for r in rows]


def _run_ranks(
    section: str,
    ranks: int,
    quick: bool,
    max_bytes: int,
    timeout: float,
    mca: tuple[str, ...],
    prefix: list[str],
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    bind_to_none: bool = True,
) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        argv = [
            *prefix,
            *mpirun_argv(ranks, mca, bind_to_none),
            sys.executable,
            "-m",
            "benchmarks.collectives_ranks",
            "--section",
            section,
            "--out",
            str(out),
            "--max-bytes",
            str(max_bytes),
            *(["--gloo-port", str(free_port())] if section in ("busbw", "fusion") else []),
            *(["--quick"] if quick else []),
            *extra,
        ]
        print(f"$ {' '.join(argv)}", flush=True)
        proc = subprocess.run(
            argv,
            cwd=ROOT,
            env=worker_env({"PYCOMM_TIMEOUT": "600", **(env or {})}),
            text=True,
            capture_output=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{section} on {ranks} ranks failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return json.loads(out.read_text())


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


EAGER_OPS = ("broadcast", "allgather", "reduce_scatter")  # what PYCOMM_EAGER_BYTES decides for


def _ratios(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, float]:
    """mpi4py's median time over pycomm's, keyed by `keys` of the pycomm row (every other field alike)."""
    by = {(*(r[k] for k in keys), r["peer"]): r["seconds"]["median"] for r in rows}
    return {k[:-1]: by[(*k[:-1], "mpi4py")] / sec for k, sec in by.items() if k[-1] == "pycomm"}


def eager_summary(rows: list[dict]) -> list[dict]:
    """Per eager limit, call pattern and rank count: the geometric mean and the lowest of mpi4py time /
    pycomm time over the collectives the limit decides for and the sizes measured."""
    ratios = _ratios(rows, ("eager_bytes", "pattern", "ranks", "op", "bytes"))
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


def plot_eager(rows: list[dict]):
    """mpi4py time / pycomm time per size for each eager limit (geometric mean over broadcast, all-gather
    and reduce-scatter), a panel per call pattern; 2 ranks solid, 4 dashed."""

    def draw(axes: Any) -> None:
        ratios = _ratios(rows, ("eager_bytes", "pattern", "ranks", "op", "bytes"))
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


def print_report(rows: dict[str, list[dict]], checks: list[dict], roofline: list[dict]) -> None:
    shards = [{**r, "median_s": r["seconds"]["median"]} for r in rows.get("shards", [])]
    if shards:
        print(table(shards, ["ranks", "op", "peer", "bytes", "median_s", "busbw_GBs"]))
    small = [{**r, "median_s": r["seconds"]["median"]} for s in (*SMALL_SECTIONS, "plain", "eager") for r in rows[s]]
    if small:
        print(table(small, ["load", "eager_bytes", "pattern", "ranks", "op", "peer", "bytes", "median_s", "busbw_GBs"]))
    if rows["busbw"]:
        busbw = [{**r, "median_s": r["seconds"]["median"]} for r in rows["busbw"]]
        print(table(busbw, ["ranks", "peer", "bytes", "median_s", "busbw_GBs"]))
    if rows["fusion"]:
        fusion = [
            {**r, "median_s": r["seconds"]["median"], "min_s": r["seconds"]["min"], "max_s": r["seconds"]["max"]}
            for r in rows["fusion"]
        ]
        print(table(fusion, ["ranks", "case", "tensors", "bytes", "min_s", "median_s", "max_s"]))
    for section in ("quantized", "quantized_shaped"):
        if rows[section]:
            print(section)
            quant = [{**r, "median_s": r["seconds"]["median"]} for r in rows[section]]
            print(
                table(
                    quant,
                    ["ranks", "codec", "bytes", "bytes_sent_per_rank", "median_s", "link_floor_s", "vs_link_floor"],
                )
            )
            phases = [
                {
                    "ranks": r["ranks"],
                    "codec": r["codec"],
                    "bytes": r["bytes"],
                    **{k: v * 1e3 for k, v in r["phase_seconds"].items()},
                }
                for r in rows[section]
                if "phase_seconds" in r
            ]
            if phases:
                print("ms per call in each phase (slowest rank)")
                print(table(phases, list(phases[0])))
    print(table(checks, ["goal", "ranks", "bytes", "ratio", "separate_tensors_ratio", "met"]))
    if roofline:
        print("roofline (memory floor at the measured bandwidth, link floor; ratios of fp32's time)")
        print(
            table(
                roofline,
                [
                    "ranks",
                    "codec",
                    "bytes",
                    "memory_floor_s",
                    "link_floor_s",
                    "floor_ratio_overlapped",
                    "floor_ratio_serial",
                    "measured_ratio",
                ],
            )
        )


def merged(
    rows: dict[str, list[dict]], old: dict[str, Any], sections: list[str], ranks: list[int]
) -> dict[str, list[dict]]:
    """This run's rows, plus the earlier file's rows that it did not measure: every row of a section it did
    not run, and other rank counts' rows of the sections it ran."""
    return {
        section: [r for r in old.get(section, []) if section not in sections or r["ranks"] not in ranks] + rows[section]
        for section in SECTIONS
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4)")
    ap.add_argument("--quick", action="store_true", help="few small sizes and repeats: a smoke test")
    ap.add_argument("--max-bytes", type=int, default=256 * MIB, help="largest message (default 256 MiB)")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--name", default="collectives", help="results file name (benchmarks/results/NAME.json)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows of results/NAME.json that this run does not measure: other rank counts' "
        "(a run split by --ranks) and other sections' (a run split by --sections)",
    )
    args = ap.parse_args(argv)
    ranks = [int(r) for r in args.ranks.split(",")]
    sections = args.sections.split(",")
    rows: dict[str, list[dict]] = {s: [] for s in SECTIONS}
    for section in sections:
        for n in ranks:
            rows[section] += run_section(section, n, args.quick, args.max_bytes, args.timeout)
    earlier, old = RESULTS / f"{args.name}.json", {}
    if args.merge and earlier.exists():
        old = json.loads(earlier.read_text())
        rows = merged(rows, old, sections, ranks)
        ranks = sorted(set(ranks) | set(old.get("ranks", [])))
    link_floor(rows["quantized_shaped"])
    checks = goals(rows)
    payload = {
        "ranks": ranks,
        "quick": args.quick,
        "max_bytes": args.max_bytes,
        "note": "CPU-only 2-core machine; ratios are between peers measured in the same run "
        "(repeat runs move small-size ratios by about 0.1)",
        **rows,
        "goals": checks,
    }
    if rows["eager"]:
        payload["eager_summary"] = eager_summary(rows["eager"])
    speedup = hugepage_speedup(rows["small_hugepages"])
    if speedup:
        payload["hugepage_speedup"] = speedup
    if "quantized_shaped" not in sections and args.merge and "roofline" in old:
        payload["roofline"] = old["roofline"]  # kept rows keep the bandwidth measured beside them
    elif rows["quantized_shaped"]:
        bw = codec_roofline.bandwidth()
        payload["roofline"] = {
            "note": codec_roofline.NOTE,
            "loadavg_1_5_15": os.getloadavg(),
            "bandwidth_GBs_per_process": bw,
            "rows": codec_roofline.roofline(rows["quantized_shaped"], bw, SHAPED_BYTES_PER_S),
        }
    small, ran = measured_small(rows), set(sections)  # the sections run pick the plot
    draw = (
        plot_busbw(rows["busbw"])
        if "busbw" in ran and rows["busbw"]
        else plot_plain(rows["plain"])
        if ran == {"plain"} and rows["plain"]
        else plot_eager(rows["eager"])
        if ran == {"eager"} and rows["eager"]
        else plot_small(small)
        if ran & set(SMALL_SECTIONS) and small
        else plot_shards(rows["shards"])
        if "shards" in ran and rows["shards"]
        else plot_codec_time(rows["quantized_shaped"])
        if "quantized_shaped" in ran and rows["quantized_shaped"]
        else None
    )
    path = save(args.name, payload, draw, panels=getattr(draw, "panels", 1))
    print_report(rows, checks, payload.get("roofline", {}).get("rows", []))
    if rows["eager"]:
        print(table(payload["eager_summary"], ["eager_bytes", "pattern", "ranks", "geomean_ratio", "lowest_ratio"]))
    if speedup:
        print("time on 4 KiB pages / time on huge pages (idle)")
        print(table(speedup, ["ranks", "op", "peer", "bytes", "speedup"]))
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
