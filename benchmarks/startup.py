"""Start-up time, with the phase breakdown of every process (PYCOMM_PROFILE_STARTUP):

- `script`: a user's script on 2 ranks under mpirun: `import torch, pycomm`, `pycomm.init()`, one all-reduce;
  peers in the same run: mpi4py (`from mpi4py import MPI`, one Allreduce) under mpirun and torch.distributed
  (`init_process_group("gloo")`, one all_reduce) under torchrun. Goal: init + first collective well under 1 s.
  `script_yield`: the same with `--mca mpi_yield_when_idle 1` (ranks yield while they poll).
- `apps`: `python -m apps.train --nproc 2` (the embedded default; 1 step, no plots, a temporary out_dir)
  until rank 0's first training step. Goal: under 5 s.
- `floor`: what torch costs alone: `python -c "import torch"`, and with torch._dynamo, which torch.optim
  imports at its first step.

Each case runs `--repeats` times, the cases interleaved; every figure is the median over repeats (per phase:
of the slowest rank). Writes results/startup.json and a PNG of the phases.

    python -m benchmarks.startup [--repeats 5] [--cases script mpi4py gloo apps floor]"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.harness import save, table
from benchmarks.run_ranks import mpirun, python, torchrun
from pycomm.startup_profile import ENV
from pycomm.startup_report import Process, read

LAUNCH = "launch"  # the phase from the benchmark's start of the command to a process's creation


def _run_script(profile: Path) -> None:
    mpirun(2, "benchmarks.workers.startup_pycomm", env={ENV: str(profile)})


def _run_script_yield(profile: Path) -> None:
    """The same script with Open MPI's ranks yielding the core while they poll (not the default on 2 ranks
    of 2 cores): how much of init is ranks spinning against each other and the machine's other load."""
    mpirun(2, "benchmarks.workers.startup_pycomm", env={ENV: str(profile)}, mca=("mpi_yield_when_idle=1",))


def _run_mpi4py(profile: Path) -> None:
    mpirun(2, "benchmarks.workers.startup_mpi4py", env={ENV: str(profile)})


def _run_gloo(profile: Path) -> None:
    torchrun(2, "benchmarks.workers.startup_gloo", env={ENV: str(profile)})


def _run_apps(profile: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as out:
        python(
            "apps.train",
            "--nproc",
            "2",
            "-o",
            "train.max_steps=1",
            "-o",
            "logging.plot=false",
            "-o",
            f"out_dir={out}",
            env={ENV: str(profile)},
            timeout=600,
        )


# case -> (how to run it, its last phase: where the clock stops)
CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "script": (_run_script, "first_allreduce"),
    "script_yield": (_run_script_yield, "first_allreduce"),
    "mpi4py": (_run_mpi4py, "first_allreduce"),
    "gloo": (_run_gloo, "first_allreduce"),
    "apps": (_run_apps, "first_step"),
}
FLOORS = {"python_import_torch": "import torch", "python_import_torch_dynamo": "import torch, torch._dynamo"}


def phases_of(processes: Sequence[Process], started: float, last: str) -> dict[str, dict[str, float]]:
    """{process label: {phase: seconds}} up to `last` (later marks, e.g. a peer's own pycomm import, dropped);
    each process's first phase is `launch`: from `started` (the `--nproc` launcher's ranks: from its
    mpirun_started) to its creation."""
    launcher = next((p for p in processes if p.label == "main"), None)
    spawned_at = launcher.at("mpirun_started") if launcher is not None else None
    out: dict[str, dict[str, float]] = {}
    for p in processes:
        if p.at(last) is None and p.label != "main":
            continue  # a process that never got there (torchrun's agent writes no marks)
        origin = spawned_at if p.label != "main" and spawned_at is not None else started
        phases = {LAUNCH: p.phases[0].t - origin}
        for ph in p.phases[1:]:
            phases[ph.name] = ph.seconds
            if ph.name == last:
                break
        out[p.label] = phases
    return out


def run_once(case: str, workdir: Path) -> dict[str, Any]:
    """One launch of `case`: seconds from the command's start to the last rank's last phase, and the phases."""
    run, last = CASES[case]
    profile = workdir / f"{case}-{time.monotonic_ns()}.jsonl"
    started = time.time()
    run(profile)
    processes = read(profile)
    ends = [t for p in processes if (t := p.at(last)) is not None]
    if len(ends) != 2:
        raise RuntimeError(f"{case}: expected the {last!r} mark of 2 ranks in {profile}, found {len(ends)}")
    spans = [_init_plus_first(p, case) for p in processes if p.at(last) is not None]
    return {
        "total_s": max(ends) - started,
        "phases": phases_of(processes, started, last),
        "init_plus_first_s": None if None in spans else max(spans),
    }


def _init_plus_first(p: Process, case: str) -> float | None:
    """From the end of the imports (torch; pycomm too for pycomm) to the first collective's end: what
    `pycomm.init()` + the first all-reduce cost against the peers' init + first collective (None for apps)."""
    ready = p.at("pycomm_imported") if case.startswith("script") else p.at("torch_imported")
    end = p.at(CASES[case][1])
    return None if case == "apps" or ready is None or end is None else end - ready


def floor_once(what: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", FLOORS[what]], check=True, timeout=300)
    return time.perf_counter() - started


def _median_phases(samples: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per process label and phase, the median over repeats."""
    out: dict[str, dict[str, float]] = {}
    for label in samples[0]:
        names = list(samples[0][label])
        out[label] = {n: statistics.median(s[label][n] for s in samples if n in s.get(label, {})) for n in names}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", nargs="+", default=[*CASES, "floor"], choices=[*CASES, "floor"])
    ap.add_argument("--name", default="startup", help="results/<name>.json and .png")
    ap.add_argument("--results-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in a.cases if c != "floor"}
    floors: dict[str, list[float]] = {f: [] for f in FLOORS} if "floor" in a.cases else {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-profiles-") as tmp:
        for _ in range(a.repeats):  # interleaved: a burst of load on the shared machine hits every case alike
            for case in runs:
                runs[case].append(run_once(case, Path(tmp)))
            for what in floors:
                floors[what].append(floor_once(what))

    rows = []
    for case, samples in runs.items():
        spans = [s["init_plus_first_s"] for s in samples if s["init_plus_first_s"] is not None]
        rows.append(
            {
                "case": case,
                "total_s": statistics.median(s["total_s"] for s in samples),
                "init_plus_first_s": statistics.median(spans) if spans else None,
                "totals": [s["total_s"] for s in samples],
                "phases": _median_phases([s["phases"] for s in samples]),
            }
        )
    for what, samples in floors.items():
        rows.append({"case": what, "total_s": statistics.median(samples), "totals": samples})
    by_case = {r["case"]: r for r in rows}
    ratios = {
        f"script_vs_{peer}": by_case["script"]["init_plus_first_s"] / by_case[peer]["init_plus_first_s"]
        for peer in ("mpi4py", "gloo")
        if "script" in by_case and peer in by_case
    }
    goals = []
    if "script" in by_case:
        goals.append(
            {
                "goal": "pycomm.init() + first all-reduce < 1 s (2 ranks, mpirun)",
                "value_s": by_case["script"]["init_plus_first_s"],
                "met": by_case["script"]["init_plus_first_s"] < 1.0,
            }
        )
    if "apps" in by_case:
        goals.append(
            {
                "goal": "python -m apps.train --nproc 2 to the first step < 5 s",
                "value_s": by_case["apps"]["total_s"],
                "met": by_case["apps"]["total_s"] < 5.0,
            }
        )

    print(
        table(
            [{k: v for k, v in r.items() if k not in ("phases", "totals")} for r in rows],
            ["case", "total_s", "init_plus_first_s"],
        )
    )
    for r in rows:
        for label, phases in r.get("phases", {}).items():
            print(f"{r['case']:>8} {label:<8} " + "  ".join(f"{n} {s:.3f}" for n, s in phases.items()))
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x (init + first collective; < 1: pycomm faster)")
    for g in goals:
        print(f"goal {'met' if g['met'] else 'MISSED'}: {g['goal']}: {g['value_s']:.2f} s")
    payload = {
        "config": {"repeats": a.repeats, "cases": a.cases, "ranks": 2},
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "rows": rows,
        "ratios": ratios,
        "goals": goals,
    }
    print(save(a.name, payload, lambda ax: _plot(ax, rows), results_dir=a.results_dir))
    return payload


def _plot(ax: Any, rows: list[dict[str, Any]]) -> None:
    """One stacked bar per case and process: its phases (median seconds), from the command's start."""
    bars = [(f"{r['case']} {label}", phases) for r in rows for label, phases in r.get("phases", {}).items()]
    bars += [(r["case"], {"import": r["total_s"]}) for r in rows if "phases" not in r]
    names = list(dict.fromkeys(n for _, phases in bars for n in phases))
    import matplotlib

    palette = matplotlib.colormaps["tab20"]
    colors = {n: palette(i % 20) for i, n in enumerate(names)}
    labelled: set[str] = set()
    for y, (label, phases) in enumerate(bars):
        left = _offset(label, rows)
        for n, s in phases.items():
            ax.barh(y, s, left=left, color=colors[n], label=None if n in labelled else n)
            labelled.add(n)
            left += s
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the command's start (median of repeats)")
    ax.set_title("start-up phases, 2 ranks")
    ax.legend(fontsize=6, title="phase (up to its mark)", title_fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))


def _offset(label: str, rows: list[dict[str, Any]]) -> float:
    """Where a rank of apps' `--nproc` launcher starts: after the launcher's own phases up to mpirun."""
    case, _, who = label.partition(" ")
    row = next(r for r in rows if r["case"] == case)
    launcher = row.get("phases", {}).get("main")
    if case != "apps" or who == "main" or launcher is None:
        return 0.0
    return sum(launcher.values())


if __name__ == "__main__":
    main()
