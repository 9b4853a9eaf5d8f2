"""DDP with pycomm's int8 and 1-bit communication hooks (pycomm/ddp_hooks.py) against DDP with fp32 gradients,
across a shaped link: 2 emulated nodes x 1 rank (benchmarks/cluster.py: a network namespace per node, veths
shaped by tc tbf, default 1 Gbit/s), Open MPI's TCP between them. The torch.distributed backend "pycomm" and a
gloo group, each with and without the hooks, alternating repeat by repeat in one mpirun job per model
(benchmarks/workers/ddp_hooks_link_run.py); rows are medians over repeats of samples/s (the slowest rank),
the ratio to fp32 DDP on the same backend in the same job, and the final training loss. Needs root; on a
shared machine run it under `flock /work/bench.lock`.

    python -m benchmarks.ddp_hooks_link [--models mnist gpt] [--rate 1gbit] [--steps 40] [--repeats 2] [--quick]

Writes benchmarks/results/ddp_hooks_link.json and .png."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.busy_load import machine_load
from benchmarks.cluster import Cluster, unavailable
from benchmarks.harness import plot_if_matplotlib, save, table
from benchmarks.run_ranks import ROOT, worker_env
from benchmarks.workers.ddp_hooks_link_run import CODECS
from benchmarks.workers.ddp_tasks import MODELS

COLUMNS = ["model", "backend", "codec", "samples_per_s", "min", "max", "ratio", "final_loss", "wire_bytes_per_step"]


def measure(cluster: Cluster, model: str, steps: int, repeats: int, codecs: list[str]) -> dict[str, list[dict]]:
    """Each case's runs (one mpirun job across the cluster's nodes)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "runs.json"
        argv = [
            *cluster.mpirun_argv(),
            sys.executable,
            "-m",
            "benchmarks.workers.ddp_hooks_link_run",
            "--model",
            model,
            "--steps",
            str(steps),
            "--repeats",
            str(repeats),
            "--codecs",
            *codecs,
            "--out",
            str(out),
        ]
        # the emulated nodes share this machine's cores: one kernel thread per rank
        env = worker_env({"PYTHONWARNINGS": "ignore::FutureWarning", "PYCOMM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{model}: mpirun exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return json.loads(out.read_text())


def summarise(model: str, runs: dict[str, list[dict]], machine: dict[str, float]) -> list[dict[str, Any]]:
    """One row per case: medians over repeats, the ratio to fp32 DDP on the same backend."""
    rows = []
    for case, got in runs.items():
        backend, codec = case.split()
        speed = [r["samples_per_s"] for r in got]
        wire = got[0]["wire_bytes_per_step"]
        rows.append(
            {
                "model": model,
                "backend": backend,
                "codec": codec,
                "samples_per_s": statistics.median(speed),
                "min": min(speed),
                "max": max(speed),
                "final_loss": statistics.median(r["final_loss"] for r in got),
                "wire_bytes_per_step": wire,
                **machine,
            }
        )
    fp32 = {r["backend"]: r["samples_per_s"] for r in rows if r["codec"] == "fp32"}
    for r in rows:
        r["ratio"] = r["samples_per_s"] / fp32[r["backend"]]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ddp_hooks_link", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--rate", default="1gbit", help="the link's tc rate (default 1gbit)")
    p.add_argument("--steps", type=int, default=40, help="steps per run, the first 3 untimed")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--codecs", nargs="+", choices=CODECS, default=list(CODECS))
    p.add_argument("--quick", action="store_true", help="MNIST, 1 repeat of 12 steps, fp32 and int8 (a smoke run)")
    p.add_argument("--results-dir", type=Path, help="where the JSON and PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.repeats, args.steps, args.codecs = ["mnist"], 1, 12, ["fp32", "int8"]
    reason = unavailable()
    if reason is not None:
        print(f"ddp_hooks_link: {reason}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    with Cluster(nodes=2, ranks_per_node=1, rate=args.rate) as cluster:
        for model in args.models:
            runs[model] = measure(cluster, model, args.steps, args.repeats, args.codecs)
            rows += summarise(model, runs[model], machine_load())
    print(table(rows, COLUMNS))

    def plot(ax: Any) -> None:
        ax.bar(range(len(rows)), [r["ratio"] for r in rows])
        ax.axhline(1.0, color="grey", linestyle="--")
        ax.set_xticks(range(len(rows)), [f"{r['model']}\n{r['backend']}\n{r['codec']}" for r in rows], fontsize=7)
        ax.set_ylabel("samples/s / fp32 DDP's on the same backend")
        ax.set_title(f"DDP + pycomm's hooks, 2 nodes x 1 rank at {args.rate} (a shared, busy 2-core machine)")

    save(
        "ddp_hooks_link",
        {
            "rate": args.rate,
            "nodes": 2,
            "ranks_per_node": 1,
            "steps": args.steps,
            "repeats": args.repeats,
            "rows": rows,
            "runs": runs,
        },
        plot_if_matplotlib(plot),
        args.results_dir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
