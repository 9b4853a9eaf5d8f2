"""A user's own script (benchmarks/workers/user_script.py: the pytorch/examples MNIST CNN, AdamW + OneCycle
+ clipping + bf16 autocast) on 2 ranks, pycomm's mbsgd against torch DDP on gloo, each started as the
user starts it, on an idle machine and beside one busy process per core (started and stopped here):
samples/s, final loss, the machine's load before each run. Every (load, case) pair runs once per repeat,
in a shuffled order, so drift in the machine's load hits every case alike; medians, min and max over
the repeats, and ratios against DDP under mpirun at the same load. Writes results/algorithms_busy.json
and a PNG.

    python -m benchmarks.algorithms --busy [--repeats 3] [--epochs 1] [--loads idle busy] [--cases ...]

Cases: `pycomm-mpi` and `ddp-mpi` under a plain `mpirun -n 2` (how a user compares them), `pycomm-gloo`
and `ddp-torchrun` under `torchrun --nproc-per-node 2` (pycomm's gloo transport). Nothing is tuned:
no thread counts, no PYCOMM_* or OMP_* variables (the ones already in the environment stay)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import psutil

from benchmarks.busy_load import busy_cores, machine_load
from benchmarks.harness import RESULTS, draw, load, save, table
from benchmarks.run_ranks import ROOT, check, free_port, mpirun_argv, worker_env

CASES = {
    "pycomm-mpi": ("mpirun", "pycomm"),
    "ddp-mpi": ("mpirun", "ddp"),
    "pycomm-gloo": ("torchrun", "pycomm"),
    "ddp-torchrun": ("torchrun", "ddp"),
}
BASELINE = "ddp-mpi"
GOALS = {("pycomm-mpi", "idle"): 1.0, ("pycomm-mpi", "busy"): 0.9}  # samples/s against DDP under mpirun
NAME = "algorithms_busy"


def kill_tree(pid: int) -> None:
    """SIGKILL a launcher, its process group and every descendant: torchrun starts each rank in a session
    of its own, out of reach of the launcher's group (and the ranks hold its pipes open)."""
    try:
        family = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def launch(case: str, epochs: int, timeout: float) -> dict[str, Any]:
    """One run of the user's script for `case`, 2 ranks; rank 0's figures."""
    launcher, backend = CASES[case]
    out = Path(tempfile.mkdtemp(prefix="bench-user-")) / "result.json"
    script = ["-m", "benchmarks.workers.user_script", "--backend", backend, "--epochs", str(epochs), "--out", str(out)]
    port = str(free_port())
    if launcher == "mpirun":
        argv = [*mpirun_argv(2), "-x", "MASTER_PORT", sys.executable, *script]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", *script]
    env = worker_env({"MASTER_PORT": port})
    for name in ("OMP_NUM_THREADS", "PYCOMM_TIMEOUT"):  # worker_env's defaults for tests: not a user's
        if name not in os.environ:
            env.pop(name, None)
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # a hung launch is killed with every rank it started
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()  # returns once no rank holds the pipes
        raise
    check(subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), " ".join(argv))
    return json.loads(out.read_text())


def measure(
    cases: list[str], loads: list[str], repeats: int, epochs: int, seed: int, timeout: float
) -> list[dict[str, Any]]:
    """Every run's figures, (load, case) pairs shuffled within each repeat."""
    runs, rng = [], random.Random(seed)
    for repeat in range(repeats):
        order = [(lo, c) for lo in loads for c in cases]
        rng.shuffle(order)
        for load_name, case in order:
            with busy_cores() if load_name == "busy" else contextlib.nullcontext():
                before = machine_load()
                try:
                    r = launch(case, epochs, timeout)
                except (subprocess.TimeoutExpired, AssertionError) as e:  # one hung or failed launch loses
                    # only its own run, recorded as such, not the others' figures
                    runs.append(
                        {
                            "repeat": repeat,
                            "load": load_name,
                            "case": case,
                            **before,
                            "failed": str(e).splitlines()[0][:300],
                        }
                    )
                    print(f"repeat {repeat} {load_name:4s} {case:12s} FAILED: {runs[-1]['failed']}", flush=True)
                    continue
            runs.append({"repeat": repeat, "load": load_name, "case": case, **before, **r})
            print(
                f"repeat {repeat} {load_name:4s} {case:12s} {r['samples_per_s']:7.1f} samples/s  "
                f"loss {r['final_loss']:.4f}  load {before['loadavg_1m']:.1f}",
                flush=True,
            )
    return runs


def summarise(runs: list[dict[str, Any]], cases: list[str], loads: list[str]) -> list[dict[str, Any]]:
    """Per (load, case): median/min/max samples/s and the load; the ratio of medians against DDP under
    mpirun at the same load, and the median of the per-repeat ratios (runs of one repeat are minutes apart,
    not hours)."""
    rows = []
    failed = [r for r in runs if "failed" in r]
    runs = [r for r in runs if "failed" not in r]
    for load_name in loads:
        base = {r["repeat"]: r["samples_per_s"] for r in runs if r["load"] == load_name and r["case"] == BASELINE}
        for case in cases:
            mine = [r for r in runs if r["load"] == load_name and r["case"] == case]
            if not mine:
                continue
            speed = [r["samples_per_s"] for r in mine]
            row = {
                "load": load_name,
                "case": case,
                "samples_per_s": statistics.median(speed),
                "samples_per_s_min": min(speed),
                "samples_per_s_max": max(speed),
                "repeats": len(mine),
                "final_loss": statistics.median(r["final_loss"] for r in mine),
                "loadavg_1m": statistics.median(r["loadavg_1m"] for r in mine),
                "failed_runs": sum(r["load"] == load_name and r["case"] == case for r in failed),
            }
            if base:
                row["vs_ddp_mpi"] = row["samples_per_s"] / statistics.median(base.values())
                paired = [r["samples_per_s"] / base[r["repeat"]] for r in mine if r["repeat"] in base]
                row["vs_ddp_mpi_paired"] = statistics.median(paired) if paired else None
            goal = GOALS.get((case, load_name))
            if goal is not None and base:
                row["goal"] = f">= {goal}x DDP: {'met' if row['vs_ddp_mpi'] >= goal else 'NOT met'}"
            rows.append(row)
    return rows


def bars(rows: list[dict[str, Any]]) -> Callable[[Any], None]:
    """The PNG: samples/s per case (median, min-max whiskers), idle and busy side by side."""

    def plot(ax: Any) -> None:
        loads = list(dict.fromkeys(r["load"] for r in rows))
        cases = list(dict.fromkeys(r["case"] for r in rows))
        width = 0.8 / len(loads)
        for j, load_name in enumerate(loads):
            got = {r["case"]: r for r in rows if r["load"] == load_name}
            xs = [i + (j - (len(loads) - 1) / 2) * width for i in range(len(cases))]
            med = [got[c]["samples_per_s"] if c in got else 0.0 for c in cases]
            err = [
                [m - got[c]["samples_per_s_min"] if c in got else 0.0 for c, m in zip(cases, med)],
                [got[c]["samples_per_s_max"] - m if c in got else 0.0 for c, m in zip(cases, med)],
            ]
            ax.bar(
                xs,
                med,
                width,
                yerr=err,
                capsize=3,
                label=f"{load_name} (load {statistics.median(r['loadavg_1m'] for r in got.values()):.1f})",
            )
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel("samples/s (median, min-max)")
        ax.set_title("a user's MNIST script, 2 ranks: idle and one busy process per core")
        ax.legend()

    return plot


def replot(name: str = NAME) -> Path:
    return draw(RESULTS / f"{name}.png", bars(load(name)["rows"]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", action="store_true", help="(how benchmarks.algorithms selects this section)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--loads", nargs="+", default=["idle", "busy"], choices=["idle", "busy"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--replot", action="store_true", help="draw the PNG again from its JSON; no runs")
    ap.add_argument("--name", default=NAME)
    ap.add_argument("--seed", type=int, default=0, help="of the shuffled order")
    ap.add_argument(
        "--timeout", type=float, default=400, help="seconds for one run (a run past it is recorded as failed)"
    )
    ap.add_argument("--results-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.replot:
        return print(replot(a.name))
    cases = a.cases if BASELINE in a.cases else [BASELINE, *a.cases]
    runs = measure(cases, a.loads, a.repeats, a.epochs, a.seed, a.timeout)
    rows = summarise(runs, cases, a.loads)
    print(
        table(
            rows,
            [
                "load",
                "case",
                "samples_per_s",
                "samples_per_s_min",
                "samples_per_s_max",
                "vs_ddp_mpi",
                "vs_ddp_mpi_paired",
                "final_loss",
                "loadavg_1m",
                "failed_runs",
                "goal",
            ],
        )
    )
    config = {"repeats": a.repeats, "epochs": a.epochs, "loads": a.loads, "cases": cases, "seed": a.seed, "ranks": 2}
    print(save(a.name, {"config": config, "rows": rows, "runs": runs}, bars(rows), results_dir=a.results_dir))


if __name__ == "__main__":
    main()
