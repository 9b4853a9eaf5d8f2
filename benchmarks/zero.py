"""ZeRO against torch DDP and FSDP2 (gloo, CPU) and pycomm mbsgd on the char GPT: samples/s, bytes of
parameters + gradients + optimizer state per rank after a step (counted from live tensors, not RSS) and
the peak memory backward adds (live heap bytes: full gradients until they are reduced, communication
buffers), on 2 and 4 ranks, fp32, for each GPT size and each load (idle, and beside one busy process per
core started and stopped here). Each launch runs every case `--repeats` times, the cases in a shuffled
order each repeat; a row is the median over the repeats with min and max, and the machine's load.
Writes results/zero.json, a table and a PNG (bytes per rank and backward's peak; speed against FSDP2).

    python -m benchmarks.zero [--sizes small wide] [--loads idle busy] [--ranks 2 4] [--repeats 3] [--steps 2]
    python -m benchmarks.zero --quick       # 2 layers, 128 wide, context 64, 1 repeat: a smoke run
    python -m benchmarks.zero --replot      # zero.png again from zero.json

Sizes (SIZES): small, 4 layers 256 wide, context 128 (3.2M parameters); wide, 6 layers 384 wide,
context 256 (10.7M, apps' char GPT). Goals: zero3 bytes per rank <= (1/N + 10%) of
DDP's; zero3 samples/s >= FSDP2's on 2 and 4 ranks, idle and busy, as medians of repeats."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.busy_load import busy_cores
from benchmarks.harness import RESULTS, draw, load, save, table
from benchmarks.run_ranks import free_port, mpirun

CASES = ["ddp", "fsdp2", "mbsgd", "zero1", "zero2", "zero3"]
SIZES = {"quick": (2, 128, 64), "small": (4, 256, 128), "wide": (6, 384, 256)}  # n_layer, n_embd, block
GOAL_SPEED = 1.0  # zero3 against FSDP2


def launch(
    n: int, steps: int, size: tuple[int, int, int], cases: list[str], repeats: int, seed: int
) -> list[dict[str, Any]]:
    out = Path(tempfile.mkdtemp(prefix="bench-zero-")) / "result.json"
    mpirun(
        n,
        "benchmarks.workers.zero_run",
        str(out),
        str(steps),
        *map(str, size),
        str(repeats),
        str(seed),
        *cases,
        timeout=3600,
        env={"BENCH_PORT": str(free_port())},
    )
    return json.loads(out.read_text())


def rows_of(runs: list[dict[str, Any]], **where: Any) -> list[dict[str, Any]]:
    """One row per case: medians over its runs (min and max of samples/s), ratios against DDP's bytes and
    FSDP2's median samples/s, the median load; `where` (ranks, size, load) is copied into each row."""
    rows = []
    ran = {r["case"] for r in runs}
    for case in [c for c in CASES if c in ran]:
        mine = [r for r in runs if r["case"] == case]
        ok = [r for r in mine if "samples_per_s" in r]
        row: dict[str, Any] = {**where, "case": case, "repeats": len(ok)}
        if not ok:
            row["error"] = mine[0].get("error", "no run finished")
            rows.append(row)
            continue
        speed = [r["samples_per_s"] for r in ok]
        row.update(
            samples_per_s=statistics.median(speed),
            samples_per_s_min=min(speed),
            samples_per_s_max=max(speed),
            state_bytes=statistics.median(r["state_bytes"] for r in ok),
            params=ok[0]["params"],
            loadavg_1m=statistics.median(r["loadavg_1m"] for r in ok),
        )
        peaks = [r["backward_peak_bytes"] for r in ok if "backward_peak_bytes" in r]
        if peaks:
            row["backward_peak_bytes"] = statistics.median(peaks)
        rows.append(row)
    by_case = {r["case"]: r for r in rows}
    for row in rows:
        if "state_bytes" in row and "state_bytes" in by_case.get("ddp", {}):
            row["bytes_vs_ddp"] = row["state_bytes"] / by_case["ddp"]["state_bytes"]
        if "samples_per_s" in row and "samples_per_s" in by_case.get("fsdp2", {}):
            row["speed_vs_fsdp2"] = row["samples_per_s"] / by_case["fsdp2"]["samples_per_s"]
            if row["case"] == "zero3":
                row["goal"] = f">= {GOAL_SPEED}x FSDP2: {'met' if row['speed_vs_fsdp2'] >= GOAL_SPEED else 'NOT met'}"
    return rows


def figure(rows: list[dict[str, Any]], title: str) -> Callable[[Any], None]:
    """The PNG. Left: parameters + gradients + optimizer state per rank (bars) and backward's peak on top
    (hatched), per case and rank count, for the first size's idle rows, with DDP's bytes / N dotted.
    Right: samples/s against FSDP2's (median, min-max whiskers) per case, one group per size, load and
    rank count; the goal line at 1. Rows of older results without size or load draw as one group."""

    def plot(axes: Any) -> None:
        memory, speed = axes
        cases = list(dict.fromkeys(r["case"] for r in rows))
        groups = list(dict.fromkeys((r.get("size", ""), r.get("load", ""), r["ranks"]) for r in rows))
        first = [g for g in groups if g[0] == groups[0][0] and g[1] == groups[0][1]]
        width = 0.8 / len(first)
        for j, g in enumerate(first):
            got = {r["case"]: r for r in rows if (r.get("size", ""), r.get("load", ""), r["ranks"]) == g}
            xs = [i + (j - (len(first) - 1) / 2) * width for i in range(len(cases))]
            state = [got[c].get("state_bytes", 0) / 2**20 if c in got else 0.0 for c in cases]
            peak = [max(got[c].get("backward_peak_bytes", 0), 0) / 2**20 if c in got else 0.0 for c in cases]
            bars = memory.bar(xs, state, width, label=f"{g[2]} ranks: state")
            colour = bars.patches[0].get_facecolor()
            if any(peak):
                memory.bar(
                    xs,
                    peak,
                    width,
                    bottom=state,
                    color=colour,
                    alpha=0.35,
                    hatch="//",
                    label=f"{g[2]} ranks: + backward's peak",
                )
            if "ddp" in got and "state_bytes" in got["ddp"]:
                memory.axhline(
                    got["ddp"]["state_bytes"] / 2**20 / g[2], color=colour, ls=":", lw=1, label=f"DDP / {g[2]}"
                )
        memory.set_xticks(range(len(cases)), cases)
        memory.set_ylabel("MiB per rank")
        memory.set_title(f"{title}: state per rank (+ backward's peak), {groups[0][0] or 'one size'}")
        memory.legend(fontsize=7)
        width = 0.8 / len(groups)
        for j, g in enumerate(groups):
            got = {r["case"]: r for r in rows if (r.get("size", ""), r.get("load", ""), r["ranks"]) == g}
            fsdp = got.get("fsdp2", {}).get("samples_per_s")
            if not fsdp:
                continue
            xs = [i + (j - (len(groups) - 1) / 2) * width for i in range(len(cases))]
            med = [got[c].get("samples_per_s", 0) / fsdp if c in got else 0.0 for c in cases]
            lo = [
                m - got[c].get("samples_per_s_min", got[c].get("samples_per_s", 0)) / fsdp if c in got else 0.0
                for c, m in zip(cases, med)
            ]
            hi = [
                got[c].get("samples_per_s_max", got[c].get("samples_per_s", 0)) / fsdp - m if c in got else 0.0
                for c, m in zip(cases, med)
            ]
            label = " ".join(str(x) for x in (g[0], g[1], f"{g[2]} ranks") if x)
            speed.bar(xs, med, width, yerr=[lo, hi], capsize=2, label=label)
        speed.axhline(GOAL_SPEED, color="grey", lw=0.8)
        speed.set_xticks(range(len(cases)), cases)
        speed.set_ylabel("samples/s / FSDP2's (median; min-max)")
        speed.set_title("speed against FSDP2 (ratios of the min and max to FSDP2's median)")
        speed.legend(fontsize=7)

    return plot


def title_of(config: dict[str, Any]) -> str:
    return (
        "GPT, AdamW fp32"
        if "sizes" in config
        else f"GPT {config['n_layer']}x{config['n_embd']}, context {config['block']}, AdamW fp32"
    )


def replot(results_dir: Path | None = None) -> Path:
    """results/zero.png drawn again from results/zero.json (no measuring)."""
    doc = load("zero", results_dir)
    where = Path(results_dir) if results_dir else RESULTS
    return draw(where / "zero.png", figure(doc["rows"], title_of(doc["config"])), panels=2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps",
        type=int,
        default=2,
        help="timed steps per run (after one warm-up step; one more, untimed, measures backward's peak)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", nargs="+", default=["small", "wide"], choices=list(SIZES))
    ap.add_argument("--loads", nargs="+", default=["idle", "busy"], choices=["idle", "busy"])
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument("--seed", type=int, default=0, help="of the shuffled orders")
    ap.add_argument(
        "--quick", action="store_true", help="the quick GPT (2 layers, 128 wide, context 64), idle, 1 repeat"
    )
    ap.add_argument("--results-dir", type=Path, default=None)
    ap.add_argument("--replot", action="store_true", help="draw zero.png again from zero.json; no runs")
    a = ap.parse_args(argv)
    if a.replot:
        print(replot(a.results_dir))
        return
    if a.quick:
        a.sizes, a.loads, a.repeats = ["quick"], ["idle"], 1
    rows = []
    for size in a.sizes:
        for load_name in a.loads:
            for n in a.ranks:
                with busy_cores() if load_name == "busy" else contextlib.nullcontext():
                    runs = launch(n, a.steps, SIZES[size], a.cases, a.repeats, a.seed)
                rows += rows_of(runs, size=size, load=load_name, ranks=n)
    print(
        table(
            rows,
            [
                "size",
                "load",
                "ranks",
                "case",
                "samples_per_s",
                "samples_per_s_min",
                "samples_per_s_max",
                "speed_vs_fsdp2",
                "state_bytes",
                "bytes_vs_ddp",
                "backward_peak_bytes",
                "loadavg_1m",
                "goal",
                "error",
            ],
        )
    )
    config = {k: v for k, v in vars(a).items() if k not in ("replot", "results_dir")}
    config["size_shapes"] = {s: dict(zip(("n_layer", "n_embd", "block"), SIZES[s])) for s in a.sizes}
    print(
        save(
            "zero",
            {"config": config, "rows": rows},
            figure(rows, title_of(config)),
            results_dir=a.results_dir,
            panels=2,
        )
    )


if __name__ == "__main__":
    main()
