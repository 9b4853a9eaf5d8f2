"""Every algorithm against torch DDP (gloo) on the tiny MNIST CNN, same data, 2 ranks, on the default
transport and on TCP only (`--mca btl self,tcp`): samples/s, bytes communicated per step, training
time to 95% eval accuracy, final accuracy. Writes results/algorithms.json, a table, and a PNG of eval
accuracy and bytes communicated against the step (one colour per algorithm, default transport).

    python -m benchmarks.algorithms [--epochs 2] [--repeats 1] [--cases ddp mbsgd ...]
    python -m benchmarks.algorithms --replot [--name algorithms_lap]   # the PNG again from the JSON
    python -m benchmarks.algorithms --model gpt [--steps 120] [--repeats 2] [--links default shaped] [--lock F]

`--busy` is a user's own script against DDP, idle and beside one busy process per core
(benchmarks/algorithms_busy.py; results/algorithms_busy.json). `--model gpt` is the section where
communication matters (benchmarks/algorithms_gpt.py: a 10.7M-parameter
char GPT on 4 ranks, also over an emulated 10 Gbit/s link; results/algorithms_gpt.json).

The cases train interleaved in one launch per transport (see benchmarks/workers/algorithms_run.py),
lapsgd and lppsgd (2 Hogwild worker processes per rank) and lapsgd-1w (1 per rank) included: each of
their segments is one opt.train() call; the workers start once (in the first segment's time) and are
reused by the later calls; their bytes are comm_stats()'s, their mean_staleness LapResult's (updates by
another worker between a worker's read of the model and its update; benchmarks/hogwild_staleness.py
measures what that staleness costs in accuracy)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.convergence_cases import CASES
from benchmarks.harness import RESULTS, draw, load, save, table
from benchmarks.run_ranks import free_port, mpirun
from benchmarks.workers.algorithms_run import LAP_CASES

TRANSPORTS = {"default": (), "tcp": ("btl=self,tcp",)}
GOALS = {"mbsgd": 1.0, "plsgd": 1.3, "qsr-sgd": 1.3}  # samples/s against DDP
# lapsgd/lppsgd: >= 1.0x DDP's samples/s at equal accuracy, taken as within EQUAL_POINTS of DDP's final accuracy
LAP_GOAL, EQUAL_POINTS = 1.0, 0.5


def launch(cases: list[str], epochs: int, mca: tuple[str, ...]) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="bench-algos-")) / "result.json"
    mpirun(
        2,
        "benchmarks.workers.algorithms_run",
        str(out),
        str(epochs),
        *cases,
        mca=mca,
        timeout=3600,
        env={"BENCH_PORT": str(free_port())},
    )
    return json.loads(out.read_text())


def summarise(runs: list[dict[str, Any]], cases: list[str]) -> list[dict[str, Any]]:
    """Median over repeats; ratios against DDP of the same transport."""
    rows = []
    for name in cases:
        med = lambda key: statistics.median(r[name][key] for r in runs)  # noqa: E731
        ttt = [r[name]["time_to_target_s"] for r in runs if r[name]["time_to_target_s"] is not None]
        rows.append(
            {
                "algorithm": name,
                "samples_per_s": med("samples_per_s"),
                "samples_per_s_min": min(r[name]["samples_per_s"] for r in runs),
                "samples_per_s_max": max(r[name]["samples_per_s"] for r in runs),
                "bytes_per_step": med("bytes_per_step"),
                "time_to_95_s": statistics.median(ttt) if ttt else None,
                "final_accuracy": med("final_accuracy"),
                "curve": runs[len(runs) // 2][name]["curve"],
                "startup_seconds": med("startup_seconds"),
                "mean_staleness": med("mean_staleness"),
            }
        )
    ddp = next(r for r in rows if r["algorithm"] == "ddp")
    for r in rows:
        r["speedup_vs_ddp"] = r["samples_per_s"] / ddp["samples_per_s"]
        r["accuracy_minus_ddp_points"] = 100 * (r["final_accuracy"] - ddp["final_accuracy"])
        if r["algorithm"] in GOALS:
            r["goal"] = (
                f">= {GOALS[r['algorithm']]}x: {'met' if r['speedup_vs_ddp'] >= GOALS[r['algorithm']] else 'NOT met'}"
            )
        if r["algorithm"] in LAP_CASES:
            met = r["speedup_vs_ddp"] >= LAP_GOAL and r["accuracy_minus_ddp_points"] >= -EQUAL_POINTS
            r["goal"] = f">= {LAP_GOAL}x within {EQUAL_POINTS} points: {'met' if met else 'NOT met'}"
    return rows


def accuracy_and_bytes(results: dict[str, list[dict[str, Any]]], transport: str) -> Callable[[Any], None]:
    """The PNG: eval accuracy (left) and bytes communicated per rank (right, log) against the training step,
    one colour per algorithm of `transport`. Against the step, not each other: a method that sends
    nothing after its start (qsr, whose H outgrows the run here) would be a vertical line against bytes."""

    def plot(axes: Any) -> None:
        import matplotlib

        accuracy, sent = axes
        colours = matplotlib.colormaps["tab20"].colors  # 20 distinct colours: no algorithm shares one
        for i, row in enumerate(results[transport]):  # dark shades first, then light; markers tell overlaps apart
            style = {
                "color": colours[(2 * i) % 20 + (i >= 10)],
                "marker": "os^Dv<>P"[i % 8],
                "ms": 3,
                "label": row["algorithm"],
            }
            steps = [p["step"] for p in row["curve"]]
            accuracy.plot(steps, [100 * p["accuracy"] for p in row["curve"]], **style)
            sent.plot(steps, [max(p["bytes"], 1) for p in row["curve"]], **style)
        accuracy.axhline(95, color="grey", lw=0.5)
        accuracy.set_xlabel("step")
        accuracy.set_ylabel("eval accuracy (%)")
        accuracy.set_title(f"tiny CNN on MNIST, 2 ranks, transport {transport}")
        sent.set_yscale("log")
        sent.set_xlabel("step")
        sent.set_ylabel("bytes communicated per rank")
        sent.set_title("communication (flat: nothing sent after the start)")
        sent.legend(fontsize=7, ncol=2)

    return plot


def replot(name: str) -> Path:
    """results/<name>.png drawn again from results/<name>.json (no measuring)."""
    doc = load(name)
    return draw(RESULTS / f"{name}.png", accuracy_and_bytes(doc["results"], next(iter(doc["results"]))), panels=2)


def main(argv: list[str] | None = None) -> None:
    pick = argparse.ArgumentParser(add_help=False)
    pick.add_argument("--model", choices=("mnist", "gpt"), default="mnist")
    pick.add_argument("--busy", action="store_true")
    model, rest = pick.parse_known_args(argv)
    if model.busy:
        from benchmarks import algorithms_busy  # loaded for its run only (it needs psutil)

        return algorithms_busy.main(rest)
    if model.model == "gpt":
        from benchmarks import algorithms_gpt  # loaded for its run only

        return algorithms_gpt.main(rest)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("mnist", "gpt"), default="mnist", help="gpt: see benchmarks/algorithms_gpt.py")
    ap.add_argument(
        "--busy",
        action="store_true",
        help="a user's own script, idle and beside a busy process per core: see benchmarks/algorithms_busy.py",
    )
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cases", nargs="+", default=["ddp", *CASES, *LAP_CASES])
    ap.add_argument("--transports", nargs="+", default=list(TRANSPORTS), choices=list(TRANSPORTS))
    ap.add_argument("--name", default="algorithms", help="results/<name>.json and .png (e.g. for a subset of cases)")
    ap.add_argument("--replot", action="store_true", help="draw results/<name>.png again from its JSON; no runs")
    args = ap.parse_args(argv)
    if args.replot:
        print(f"wrote {replot(args.name)}", file=sys.stderr)
        return
    cases = args.cases if "ddp" in args.cases else ["ddp", *args.cases]
    results: dict[str, list[dict[str, Any]]] = {}
    columns = [
        "algorithm",
        "samples_per_s",
        "speedup_vs_ddp",
        "bytes_per_step",
        "time_to_95_s",
        "final_accuracy",
        "accuracy_minus_ddp_points",
        "startup_seconds",
        "mean_staleness",
        "goal",
    ]
    for transport in args.transports:
        runs = [launch(cases, args.epochs, TRANSPORTS[transport]) for _ in range(args.repeats)]
        results[transport] = summarise(runs, cases)
        print(f"\n== transport: {transport} (2 ranks, {args.epochs} epochs, median of {args.repeats})")
        print(table(results[transport], columns))

    path = save(
        args.name,
        {"epochs": args.epochs, "repeats": args.repeats, "ranks": 2, "results": results},
        accuracy_and_bytes(results, args.transports[0]),
        panels=2,
    )
    print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
