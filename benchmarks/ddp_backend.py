"""DDP and FSDP2 (fully_shard) on the torch.distributed backend "pycomm" against the same on gloo: the tiny MNIST
CNN or the char GPT (--model; benchmarks/workers/ddp_tasks.py), 2 and 4 ranks (mpirun), idle and beside a busy
loop per core (benchmarks/busy_load.py), samples/s of the slowest rank, the two backends alternating repeat by
repeat in one job; the figure is the ratio of the medians (pycomm / gloo). Run under `flock /work/bench.lock`
on a shared machine: "idle" is then only as idle as the machine was (the load averages are recorded beside the
figures).

    python -m benchmarks.ddp_backend [--model mnist|gpt] [--repeats 3] [--steps N] [--ranks 2 4]
        [--wrappers ddp fsdp2] [--quick] [--profile]

--profile prints, instead, where DDP's step time goes on each backend (benchmarks/workers/ddp_backend_phases.py:
forward+backward and optimizer medians, each thread's CPU, run-queue wait and context switches), one JSON line
per run.

Writes benchmarks/results/ddp_backend.json and .png (the MNIST CNN), ddp_backend_gpt.json and .png (the GPT)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.busy_load import busy_cores, machine_load
from benchmarks.harness import plot_if_matplotlib, save, table
from benchmarks.run_ranks import mpirun
from benchmarks.workers.ddp_tasks import MODELS

DEFAULT_STEPS = {"mnist": 40, "gpt": 20}  # timed steps per repeat: the GPT's take ~10x the CNN's
TITLES = {"mnist": "MNIST CNN", "gpt": "char GPT (0.8M parameters)"}


def measure(
    model: str, wrapper: str, ranks: int, busy: bool, repeats: int, steps: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """samples/s per repeat of each backend (one mpirun job), and the machine's load as the job ended."""
    with tempfile.TemporaryDirectory() as tmp, busy_cores() if busy else contextlib.nullcontext():
        out = Path(tmp) / "rows.json"
        mpirun(
            ranks,
            "benchmarks.workers.ddp_backend_run",
            "--model",
            model,
            "--wrapper",
            wrapper,
            "--steps",
            str(steps),
            "--repeats",
            str(repeats),
            "--out",
            str(out),
            timeout=1800,
            env={"PYTHONWARNINGS": "ignore::FutureWarning"},
        )
        return json.loads(out.read_text()), machine_load()


def profile(model: str, ranks: int, busy: bool, repeats: int, steps: int) -> str:
    """The phases worker's JSON lines (rank 0's), DDP on each backend alternating, in one mpirun job."""
    with busy_cores() if busy else contextlib.nullcontext():
        proc = mpirun(
            ranks,
            "benchmarks.workers.ddp_backend_phases",
            *("--model", model, "--steps", str(steps), "--repeats", str(repeats)),
            timeout=1800,
            env={"PYTHONWARNINGS": "ignore::FutureWarning"},
        )
        return f"# {model}, {ranks} ranks, {'busy' if busy else 'idle'}, load {machine_load()}\n{proc.stdout}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ddp_backend", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=MODELS, default="mnist")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--steps", type=int, help="timed steps per repeat, after 5 warm-up steps (default: mnist 40, gpt 20)"
    )
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--wrappers", nargs="+", choices=("ddp", "fsdp2"), default=["ddp", "fsdp2"])
    p.add_argument("--loads", nargs="+", choices=("idle", "busy"), default=["idle", "busy"])
    p.add_argument("--quick", action="store_true", help="2 repeats of 10 steps, DDP on 2 idle ranks (a smoke run)")
    p.add_argument("--profile", action="store_true", help="print where DDP's step time goes (writes no results)")
    p.add_argument("--results-dir", type=Path, help="where the JSON and PNG go (default benchmarks/results)")
    args = p.parse_args(argv)
    args.steps = args.steps or DEFAULT_STEPS[args.model]
    if args.quick:
        args.repeats, args.steps, args.ranks, args.wrappers, args.loads = 2, 10, [2], ["ddp"], ["idle"]
    if args.profile:
        for ranks in args.ranks:
            for load in args.loads:
                print(profile(args.model, ranks, load == "busy", args.repeats, args.steps), flush=True)
        return 0
    rows: list[dict[str, Any]] = []
    samples: dict[str, dict[str, list[float]]] = {}
    for wrapper in args.wrappers:
        for ranks in args.ranks:
            for load in args.loads:
                case = f"{wrapper} {ranks} ranks {load}"
                got, machine = measure(args.model, wrapper, ranks, load == "busy", args.repeats, args.steps)
                samples[case] = got
                median = {k: statistics.median(v) for k, v in got.items()}
                rows += [
                    {
                        "model": args.model,
                        "wrapper": wrapper,
                        "ranks": ranks,
                        "load": load,
                        "backend": k,
                        "samples_per_s": median[k],
                        "min": min(v),
                        "max": max(v),
                        "ratio": median[k] / median["gloo"],
                        **machine,
                    }
                    for k, v in got.items()
                ]
    print(table(rows, ["model", "wrapper", "ranks", "load", "backend", "samples_per_s", "min", "max", "ratio"]))

    def plot(ax: Any) -> None:
        mine = [r for r in rows if r["backend"] == "pycomm"]
        ax.bar(range(len(mine)), [r["ratio"] for r in mine])
        ax.axhline(1.0, color="grey", linestyle="--")
        ax.set_xticks(range(len(mine)), [f"{r['wrapper']}\n{r['ranks']}r {r['load']}" for r in mine])
        ax.set_ylabel("samples/s, pycomm / gloo (median of repeats)")
        ax.set_title(f"{TITLES[args.model]}: backend pycomm vs gloo (a shared, busy 2-core machine)")

    save(
        "ddp_backend" if args.model == "mnist" else f"ddp_backend_{args.model}",
        {"model": args.model, "repeats": args.repeats, "steps": args.steps, "rows": rows, "samples": samples},
        plot_if_matplotlib(plot),
        args.results_dir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
