"""Two nodes at 100 Mbit/s: the embedded default problem of apps.train (SmallCNN on the embedded MNIST, batch
32 per rank) on 2 nodes x 1 rank of the emulated cluster (benchmarks/cluster.py), the same number of steps
with mbsgd, mbsgd + int8 gradients, plsgd (H = 8) and torch DDP (gloo, started by torchrun per node):
training seconds (apps.train: its clock at the last step, from train.jsonl; DDP: its loop) and the whole
launch's wall time (start-up and apps.train's final evaluation included), median of the
repeats, ratios against DDP. Needs root (the cluster); says why not otherwise.

    python -m benchmarks.nodes [--steps 200] [--repeats 3] [--rate 100mbit]"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.cluster import Cluster, unavailable
from benchmarks.harness import plot_if_matplotlib, save, table
from benchmarks.run_ranks import ROOT, worker_env

CASES: dict[str, list[str]] = {   # case -> apps.train overrides (ddp: its own worker)
    "ddp": [],
    "mbsgd": ["-o", "algorithm.name=mbsgd", "-o", "algorithm.options={}"],
    "mbsgd+int8": ["-o", "algorithm.name=mbsgd", "-o", "algorithm.options={codec: int8}"],
    "plsgd": ["-o", "algorithm.name=plsgd", "-o", "algorithm.options={averaging_freq: 8}"],
}
DONE = re.compile(r"done: (\d+) steps in ([\d.]+)s")


def run_case(cluster: Cluster, case: str, steps: int, out_dir: Path, timeout: float) -> dict[str, float]:
    """One run of `case` (apps.train's files under a new out_dir each time: a run dir left there would be
    resumed): its training seconds and the launch's wall seconds."""
    start = time.perf_counter()
    if case == "ddp":
        procs = [subprocess.Popen(argv, cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for argv in cluster.torchrun_argvs(["-m", "benchmarks.workers.nodes_ddp", str(steps)])]
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
        codes, text = [p.returncode for p in procs], "\n".join(outs)
    else:
        argv = [*cluster.mpirun_argv(), sys.executable, "-m", "apps.train", "-o", f"out_dir={out_dir}",
                "-o", f"name={case}", *CASES[case], "-o", f"train.max_steps={steps}", "-o", "checkpoint.every_steps=0",
                "-o", "train.eval_every_epochs=100", "-o", "logging.plot=false"]
        proc = subprocess.run(argv, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=timeout)
        codes, text = [proc.returncode], proc.stdout + proc.stderr
    wall = time.perf_counter() - start
    done = DONE.search(text)
    if any(codes) or done is None or int(done[1]) != steps:
        raise RuntimeError(f"{case}: exit codes {codes}, expected 'done: {steps} steps'\n{text[-3000:]}")
    if case == "ddp":
        return {"train_s": float(done[2]), "wall_s": wall}
    last = json.loads((out_dir / case / "train.jsonl").read_text().splitlines()[-1])
    assert last["step"] == steps, last
    return {"train_s": float(last["time"]), "wall_s": wall}


def summarise(runs: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    ddp = runs["ddp"]
    rows = []
    for case, got in runs.items():
        row: dict[str, Any] = {"case": case, "repeats": len(got)}
        for key in ("train_s", "wall_s"):
            values = [g[key] for g in got]
            row[key], row[f"{key}_min"], row[f"{key}_max"] = statistics.median(values), min(values), max(values)
            # per repeat against the DDP run of the same repeat: drift of a shared machine cancels
            row[f"{key}_vs_ddp"] = statistics.median(g[key] / d[key] for g, d in zip(got, ddp))
        rows.append(row)
    return rows


def bars(rows: list[dict[str, Any]], title: str) -> Callable[[Any], None]:
    def plot(ax: Any) -> None:
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["train_s"] for r in rows], 0.4, label="training (median)")
        ax.bar([x + 0.2 for x in xs], [r["wall_s"] for r in rows], 0.4, label="whole launch (median)")
        ax.set_xticks(list(xs), [r["case"] for r in rows])
        ax.set_ylabel("seconds")
        ax.set_title(title)
        ax.legend(fontsize=8)
    return plot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", default="100mbit", help="the link between the nodes (tc rate, e.g. 1gbit)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--name", default="nodes", help="results/<name>.json and .png")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"benchmarks.nodes: {reason}", file=sys.stderr)
        return 2
    cases = args.cases if "ddp" in args.cases else ["ddp", *args.cases]
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in cases}
    with Cluster(nodes=2, ranks_per_node=1, rate=args.rate) as cluster, tempfile.TemporaryDirectory() as out:
        for rep in range(args.repeats):    # cases interleaved per repeat: load drift hits each alike
            for case in cases:
                runs[case].append(run_case(cluster, case, args.steps, Path(out) / f"{rep}", args.timeout))
                print(f"repeat {rep + 1}/{args.repeats} {case}: {runs[case][-1]}", file=sys.stderr, flush=True)
    rows = summarise(runs)
    title = f"MNIST CNN, 2 nodes x 1 rank at {args.rate}, {args.steps} steps"
    print(f"== {title}, median of {args.repeats}")
    print(table(rows, ["case", "train_s", "train_s_vs_ddp", "wall_s", "wall_s_vs_ddp", "train_s_min", "train_s_max"]))
    path = save(args.name, {"steps": args.steps, "repeats": args.repeats, "rate": args.rate, "nodes": 2,
                            "ranks_per_node": 1, "rows": rows}, plot_if_matplotlib(bars(rows, title)))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
