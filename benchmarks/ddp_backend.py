"""DDP on the torch.distributed backend "pycomm" against DDP on gloo: the tiny MNIST CNN, 2 ranks (mpirun),
samples/s of the slowest rank, the two alternating repeat by repeat in one job; the figure is the ratio of
the medians (pycomm / gloo).

    python -m benchmarks.ddp_backend [--repeats 5] [--steps 60] [--quick]

Writes benchmarks/results/ddp_backend.json and .png."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import plot_if_matplotlib, save, table
from benchmarks.run_ranks import mpirun


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ddp_backend", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=60, help="timed DDP steps per repeat (after 5 warm-up steps)")
    p.add_argument("--quick", action="store_true", help="2 repeats of 10 steps (a smoke run)")
    p.add_argument("--results-dir", type=Path, help="where the JSON and PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.steps = 2, 10
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        mpirun(2, "benchmarks.workers.ddp_backend_run", "--steps", str(args.steps), "--repeats", str(args.repeats),
               "--out", str(out), timeout=1800, env={"PYTHONWARNINGS": "ignore::FutureWarning"})
        samples: dict[str, list[float]] = json.loads(out.read_text())
    median = {k: statistics.median(v) for k, v in samples.items()}
    rows = [{"backend": k, "samples_per_s": median[k], "min": min(v), "max": max(v),
             "ratio": median[k] / median["gloo"]} for k, v in samples.items()]
    print(table(rows, ["backend", "samples_per_s", "min", "max", "ratio"]))

    def plot(ax: Any) -> None:
        ax.boxplot([samples[k] for k in samples], tick_labels=list(samples))
        ax.set_ylabel("samples/s (2 ranks, slowest rank)")
        ax.set_title("DDP on the MNIST CNN: backend pycomm vs gloo")

    save("ddp_backend", {"repeats": args.repeats, "steps": args.steps, "rows": rows, "samples": samples},
         plot_if_matplotlib(plot), args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
