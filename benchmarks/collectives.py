"""Collectives benchmark: `python -m benchmarks.collectives [--ranks 2,4] [--quick]`.

Launches benchmarks/collectives_ranks.py under mpirun for every rank count and section, merges the
rows into benchmarks/results/collectives.json, draws busbw against size (a line per peer,
collectives_plots.py) and prints the tables and the goals (collectives_goals.py) as ratios against the
peers measured in the same run:
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
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from benchmarks import codec_roofline, shaped_link
from benchmarks.busy_load import busy_cores
from benchmarks.collectives_common import (
    BUSY_SAMPLE_S,
    EAGER_LIMITS,
    HUGEPAGES_LOAD,
    MIB,
    PAIRED_LOAD,
    PATTERNS,
    PLAIN_LOAD,
    PLAIN_QUICK_SIZES,
    PLAIN_SIZES,
    SECTIONS,
    SHAPED_BYTES_PER_S,
    SHAPED_RATE,
    SMALL_SECTIONS,
)
from benchmarks.collectives_goals import eager_summary, goals, hugepage_speedup, link_floor, measured_small
from benchmarks.collectives_plots import plot_busbw, plot_codec_time, plot_eager, plot_plain, plot_shards, plot_small
from benchmarks.harness import RESULTS, save, table
from benchmarks.run_ranks import ROOT, free_port, mpirun_argv, worker_env
from pycomm import hugepages

SMALL_PAGES = {hugepages.TORCH_ENV: "0"}  # torch's default: the user's tensors on 4 KiB pages


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
