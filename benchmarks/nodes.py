"""Across slow links: the wall-clock time to a target loss of every method of benchmarks/nodes_cases.py on the
emulated cluster (benchmarks/cluster.py), N nodes x R ranks, at each inter-node rate. The target is torch DDP's
final eval loss (within 1%) in the same run; per case: training seconds to reach it (evaluations taken out),
samples/s, bytes across the nodes' link, final eval loss, and the ratios against DDP; a PNG of eval loss
against training time, one panel per link. The goals, each a ratio inside one run: the best pycomm method
reaches DDP's loss in <= 1/3 of DDP's time at 100 Mbit/s; quantized mbsgd runs at >= 90% of its ceiling (the
same script with no communication: every rank alone). Needs root (the cluster); says why not otherwise.

    python -m benchmarks.nodes [--rates 100mbit 1gbit] [--ranks-per-node 1] [--steps 300] [--seeds 1]
    python -m benchmarks.nodes --rates 10gbit --merge     # add a link to results/nodes.json
    python -m benchmarks.nodes --problem gpt-char --ranks-per-node 2 --name nodes_gpt --cases ddp mbsgd qsr"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from benchmarks.cluster import Cluster, unavailable
from benchmarks.harness import RESULTS, plot_if_matplotlib, save, table
from benchmarks.nodes_cases import CASES, Curve, run_case
from benchmarks.nodes_problem import BATCH, PROBLEMS

TARGET_SLACK = 1.01  # "DDP's final loss within 1%"
PEER = "ddp"
# pycomm's DiLoCo with torchft's settings, each judged against torchft's: through apps.train under HSDP, through
# apps.train alone, and in torchft's own bare loop (the like-for-like one)
DILOCO_VS_TORCHFT = ("diloco-torchft-settings", "diloco-apps", "diloco-bare")
COLUMNS = [
    "rate",
    "case",
    "final_loss",
    "to_target_s",
    "to_target_vs_ddp",
    "train_s",
    "samples_per_s",
    "bytes_across",
    "bytes_vs_ddp",
]


def time_to(curve: Curve, target: float) -> Optional[float]:
    """Training seconds at the first evaluation at or below `target`; None where never reached."""
    return next((t for _, t, loss in curve if loss <= target), None)


def _median_or_never(values: list[Optional[float]]) -> Optional[float]:
    """The median with None (never reached) counted as infinite; None when that median is."""
    median = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(median) else median


def summarise(rate: str, runs: dict[str, list[dict[str, Any]]], samples_per_step: int) -> list[dict[str, Any]]:
    """One row per case (medians over seeds; each seed's target is DDP's final loss in that seed). The time to the
    target is the median over every seed, a seed that never reached it counting as never: a case that reached it
    in fewer than half its seeds has none."""
    rows = []
    for case, got in runs.items():
        per_seed = []
        for g, d in zip(got, runs[PEER]):
            target = d["curve"][-1][2] * TARGET_SLACK
            mine, ddp = time_to(g["curve"], target), time_to(d["curve"], target)
            per_seed.append((mine, None if mine is None or not ddp else mine / ddp))
        reached = [p for p in per_seed if p[0] is not None]
        steps = got[0]["curve"][-1][0]
        row: dict[str, Any] = {
            "rate": rate,
            "case": case,
            "seeds": len(got),
            "final_loss": statistics.median(g["curve"][-1][2] for g in got),
            "final_loss_min": min(g["curve"][-1][2] for g in got),
            "final_loss_max": max(g["curve"][-1][2] for g in got),
            "to_target_s": _median_or_never([p[0] for p in per_seed]),
            "to_target_vs_ddp": _median_or_never([p[1] for p in per_seed]),
            "reached": f"{len(reached)}/{len(got)}",
            "train_s": statistics.median(g["train_s"] for g in got),
            "samples_per_s": statistics.median(steps * samples_per_step / g["train_s"] for g in got),
            "wall_s": statistics.median(g["wall_s"] for g in got),
            "bytes_across": statistics.median(g["bytes_across"] for g in got),
        }
        rows.append(row)
    ddp = next(r for r in rows if r["case"] == PEER)
    for r in rows:
        r["bytes_vs_ddp"] = r["bytes_across"] / ddp["bytes_across"] if ddp["bytes_across"] else None
        r["samples_per_s_vs_ddp"] = r["samples_per_s"] / ddp["samples_per_s"]
    return rows


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The goals this run can judge, each a ratio between cases of one link."""
    out = []
    by = {(r["rate"], r["case"]): r for r in rows}
    for rate in dict.fromkeys(r["rate"] for r in rows):
        pycomm = [
            r
            for r in rows
            if r["rate"] == rate
            and not CASES[r["case"]].peer
            and not CASES[r["case"]].independent
            and r["to_target_vs_ddp"] is not None
        ]
        if rate == "100mbit" and pycomm:
            best = min(pycomm, key=lambda r: r["to_target_vs_ddp"])
            out.append(
                {
                    "goal": f"{rate}: best pycomm method ({best['case']}) to DDP's loss, time vs DDP",
                    "ratio": best["to_target_vs_ddp"],
                    "target": "<= 0.333",
                    "met": best["to_target_vs_ddp"] <= 1 / 3,
                }
            )
        theirs = by.get((rate, "torchft-diloco"))
        for case in DILOCO_VS_TORCHFT:
            ours = by.get((rate, case))
            if not (ours and theirs):
                continue
            # "the same loss": within 2% of torchft's median, or no worse than torchft's worst seed
            same_loss = ours["final_loss"] <= theirs.get("final_loss_max", theirs["final_loss"])  # older files
            for what, ratio, target, met in (
                (
                    "final loss",
                    ours["final_loss"] / theirs["final_loss"],
                    "<= 1.02 or <= torchft's worst seed",
                    lambda r: r <= 1.02 or same_loss,
                ),
                ("bytes across", ours["bytes_across"] / theirs["bytes_across"], "<= 1.0", lambda r: r <= 1.0),
                ("samples/s", ours["samples_per_s"] / theirs["samples_per_s"], ">= 1.0", lambda r: r >= 1.0),
            ):
                out.append(
                    {
                        "goal": f"{rate}: pycomm DiLoCo ({case}) with torchft's settings, {what} vs torchft's",
                        "ratio": ratio,
                        "target": target,
                        "met": met(ratio),
                    }
                )
        ceiling = by.get((rate, "mbsgd-nocomm"))
        for case in ("mbsgd+int8", "mbsgd+1bit"):
            if ceiling and (rate, case) in by:
                ratio = by[(rate, case)]["samples_per_s"] / ceiling["samples_per_s"]
                out.append(
                    {
                        "goal": f"{rate}: {case} samples/s vs its ceiling (no communication)",
                        "ratio": ratio,
                        "target": ">= 0.9",
                        "met": ratio >= 0.9,
                    }
                )
    return out


def panels(curves: dict[str, dict[str, Curve]], title: str) -> Callable[[Any], None]:
    """Eval loss against training seconds, one panel per link, a line per case."""

    def plot(axes: Any) -> None:
        from matplotlib import colormaps

        colours = colormaps["tab20"]  # one per case, the same in every panel
        axes = axes if isinstance(axes, list) else [axes]
        for ax, (rate, cases) in zip(axes, curves.items()):
            for case, curve in cases.items():
                if CASES[case].independent:  # a ceiling of speed, not a training run of the method
                    continue
                ax.plot(
                    [t for _, t, _ in curve],
                    [loss for _, _, loss in curve],
                    marker=".",
                    linestyle="--" if CASES[case].peer else "-",
                    label=case,
                    color=colours(list(CASES).index(case) % 20),
                )
            if PEER in cases:
                ax.axhline(cases[PEER][-1][2] * TARGET_SLACK, color="grey", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_xlabel("training seconds (evaluations excluded)")
            ax.set_ylabel("eval loss")
            ax.set_title(f"{title} at {rate}", fontsize=9)
        axes[0].legend(fontsize=7)

    return plot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="seeds 0..N-1, each the model's initialisation and the data order, the same for every case",
    )
    ap.add_argument("--rates", nargs="+", default=["100mbit", "1gbit"], help="inter-node links (tc rates)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--problem", default="mnist-cnn", choices=list(PROBLEMS), help="benchmarks/nodes_problem.py's")
    ap.add_argument("--name", default="nodes", help="results/<name>.json and .png")
    ap.add_argument("--results-dir", type=Path, default=None, help="instead of benchmarks/results")
    ap.add_argument("--merge", action="store_true", help="keep the other links' rows of results/<name>.json")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument(
        "--runs-log",
        type=Path,
        default=None,
        help="append each finished run to this JSON-lines file as it ends (a cut-short run keeps them)",
    )
    ap.add_argument("--from-log", type=Path, default=None, help="write the result from a --runs-log, running nothing")
    args = ap.parse_args(argv)
    reason = None if args.from_log else unavailable()
    if reason is not None:
        print(f"benchmarks.nodes: {reason}", file=sys.stderr)
        return 2
    cases = [PEER, *(c for c in args.cases if c != PEER)]
    torchft = [c for c in cases if CASES[c].torchft]
    if torchft and args.ranks_per_node > 1:  # torchft syncs rank k of each node only; the worker wraps nothing within
        ap.error(f"{', '.join(torchft)} need --ranks-per-node 1 (the worker does not sync a node's own ranks)")
    logged = [json.loads(line) for line in args.from_log.read_text().splitlines()] if args.from_log else []
    rows: list[dict[str, Any]] = []
    curves: dict[str, dict[str, Curve]] = {}
    old = (RESULTS if args.results_dir is None else args.results_dir) / f"{args.name}.json"
    if args.merge and old.exists():
        prev = json.loads(old.read_text())
        if (prev.get("model", "mnist-cnn"), prev.get("seeds", 1)) != (args.problem, args.seeds):
            ap.error(f"--merge: {old} holds {prev.get('model')} over {prev.get('seeds')} seed(s), not {args.problem}")
        rows = [r for r in prev.get("rows", []) if r["rate"] not in args.rates]
        curves = {k: v for k, v in prev.get("curves", {}).items() if k not in args.rates}
    failed: list[dict[str, Any]] = []
    for rate in args.rates:
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
        if args.from_log:
            for r in logged:
                if r["rate"] == rate and r["case"] in runs:
                    runs[r["case"]].append(r["run"])
            size = args.nodes * args.ranks_per_node
        else:
            size = _run_rate(args, rate, cases, runs, failed)
        runs = {c: got for c, got in runs.items() if len(got) == args.seeds}  # every seed, or left out
        if PEER not in runs:
            raise SystemExit(f"benchmarks.nodes: the {PEER} peer failed at {rate}: no target to race to")
        rows += summarise(rate, runs, BATCH * size)
        curves[rate] = {c: got[0]["curve"] for c, got in runs.items()}
    _save(args, rows, curves, failed)
    return 0


def _run_rate(
    args: argparse.Namespace,
    rate: str,
    cases: list[str],
    runs: dict[str, list[dict[str, Any]]],
    failed: list[dict[str, Any]],
) -> int:
    """Every case at `rate`, seeds interleaved, into `runs` (failures into `failed`); the cluster's size."""
    with Cluster(args.nodes, args.ranks_per_node, rate) as cluster, tempfile.TemporaryDirectory() as out:
        for seed in range(args.seeds):  # cases interleaved per seed: load drift hits each alike
            for case in cases:
                try:
                    got = run_case(
                        cluster,
                        PROBLEMS[args.problem],
                        CASES[case],
                        args.steps,
                        seed,
                        Path(out) / f"{seed}",
                        args.timeout,
                    )
                except (RuntimeError, subprocess.TimeoutExpired) as e:  # the other cases still count
                    print(f"{rate} seed {seed} {case} FAILED: {e}", file=sys.stderr, flush=True)
                    failed.append({"rate": rate, "case": case, "seed": seed, "error": str(e)[:300]})
                    continue
                runs[case].append(got)
                if args.runs_log:
                    with args.runs_log.open("a") as log:
                        log.write(json.dumps({"rate": rate, "case": case, "seed": seed, "run": got}) + "\n")
                print(
                    f"{rate} seed {seed} {case}: train {got['train_s']:.1f}s, final loss "
                    f"{got['curve'][-1][2]:.4f}, {got['bytes_across'] / 1e6:.1f} MB across",
                    file=sys.stderr,
                    flush=True,
                )
        return cluster.size


def _save(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    curves: dict[str, dict[str, Curve]],
    failed: list[dict[str, Any]],
) -> None:
    met = goals(rows)
    title = f"{PROBLEMS[args.problem].title}, {args.nodes} nodes x {args.ranks_per_node} rank(s), {args.steps} steps"
    print(f"== {title}")
    print(table(rows, COLUMNS))
    print(table(met, ["goal", "ratio", "target", "met"]))
    path = save(
        args.name,
        {
            "model": args.problem,
            "steps": args.steps,
            "seeds": args.seeds,
            "nodes": args.nodes,
            "ranks_per_node": args.ranks_per_node,
            "batch_per_rank": BATCH,
            "target": f"DDP's final eval loss x {TARGET_SLACK}",
            "rows": rows,
            "goals": met,
            "failed": failed,
            "curves": curves,
        },
        plot_if_matplotlib(panels(curves, title)),
        results_dir=args.results_dir,
        panels=len(curves),
    )
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
