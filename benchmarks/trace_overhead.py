"""What tracing costs a blocking 4 KiB all-reduce on 2 ranks (mpirun): tracing compiled in but off
against the core built from before tracing (`baseline`), and tracing on.

    python -m benchmarks.trace_overhead [--rounds 5] [--baseline-dir DIR] [--quick]

The baseline is the source at the commit before csrc/diagnostics/trace.cc was added (git archive into
build/trace_overhead_baseline/<sha>, built there once with `make build`, about 2-8 minutes), or
--baseline-dir, a checkout whose core is built. One round launches the baseline job, then the current
one, which interleaves off and on sample by sample; the figure of each is the median over rounds of its
per-round median (per call, the slowest rank). Writes benchmarks/results/trace_overhead.json and .png."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import save, table

ROOT = Path(__file__).resolve().parent.parent
RANKS_SCRIPT = Path(__file__).resolve().parent / "trace_overhead_ranks.py"


def baseline_commit() -> str:
    """The commit before the one that added the core's trace recorder."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "csrc/diagnostics/trace.cc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("trace_overhead: no commit adds csrc/diagnostics/trace.cc here; pass --baseline-dir")
    return subprocess.run(
        ["git", "rev-parse", f"{added[-1]}^"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def baseline_tree() -> Path:
    sha = baseline_commit()
    tree = ROOT / "build" / "trace_overhead_baseline" / sha[:12]
    if not list((tree / "pycomm").glob("_C*.so")):
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        print(f"building the baseline core ({sha[:12]}) in {tree} ...", flush=True)
        subprocess.run(["make", "build"], cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return tree


def launch(tree: Path, variants: str, args: argparse.Namespace) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        argv = ["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += [
            sys.executable,
            str(RANKS_SCRIPT),
            "--variants",
            variants,
            "--calls",
            str(args.calls),
            "--samples",
            str(args.samples),
            "--out",
            str(out),
        ]
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        for k in ("PYCOMM_TRACE", "PYCOMM_FLIGHT_RECORDER"):
            env.pop(k, None)
        subprocess.run(argv, env=env, check=True, cwd=tree, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trace_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=2000, help="all-reduces per sample")
    p.add_argument("--samples", type=int, default=15, help="samples per variant per launch")
    p.add_argument("--baseline-dir", type=Path, help="a checkout from before tracing, its core built")
    p.add_argument("--quick", action="store_true", help="1 round of 3 samples of 200 calls (a smoke run)")
    p.add_argument("--results-dir", type=Path, help="where the JSON and PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.samples, args.calls = 1, 3, 200
    base = args.baseline_dir or baseline_tree()
    per_round: dict[str, list[float]] = {"baseline": [], "off": [], "on": []}
    samples: dict[str, list[float]] = {k: [] for k in per_round}
    for r in range(args.rounds):
        got = {"baseline": launch(base, "off", args)["off"], **launch(ROOT, "off,on", args)}
        for k, v in got.items():
            per_round[k].append(statistics.median(v))
            samples[k] += v
        print(
            f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {1e6 * v[-1]:.2f} us" for k, v in per_round.items()),
            flush=True,
        )
    us = {k: 1e6 * statistics.median(v) for k, v in per_round.items()}
    rows = [
        {
            "variant": k,
            "median_us": us[k],
            "min_us": 1e6 * min(samples[k]),
            "max_us": 1e6 * max(samples[k]),
            "vs_baseline": us[k] / us["baseline"],
        }
        for k in per_round
    ]
    print(table(rows, ["variant", "median_us", "min_us", "max_us", "vs_baseline"]))

    def plot(ax: Any) -> None:
        ax.boxplot([[1e6 * s for s in samples[k]] for k in per_round], tick_labels=list(per_round))
        ax.set_ylabel("us per blocking 4 KiB all-reduce (2 ranks, slowest rank)")
        ax.set_title("tracing: compiled in but off vs the build before it, and on")

    save(
        "trace_overhead",
        {
            "rounds": args.rounds,
            "calls": args.calls,
            "samples": args.samples,
            "baseline": str(base),
            "rows": rows,
            "per_round_s": per_round,
        },
        plot,
        args.results_dir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
