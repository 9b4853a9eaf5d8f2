"""Running the grid: one `python -m apps.train` subprocess per run (what users run), skipped when its
results are already on disk, so an interrupted reproduction continues where it stopped."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.reproduce.grid import REPO, Variant, overrides


@dataclass(frozen=True)
class RunSpec:
    variant: Variant
    seed: int
    quick: bool

    def directory(self, runs_dir: Path) -> Path:
        return runs_dir / f"{self.variant.key}-s{self.seed}"

    @property
    def steps(self) -> int:
        return (self.variant.task.quick if self.quick else self.variant.task.full).steps


def finished(spec: RunSpec, runs_dir: Path) -> bool:
    """The run's last evaluation (at its final step) is on disk: apps.train writes it after the last
    step, so a run killed earlier is trained again from the start."""
    path = spec.directory(runs_dir) / "eval.csv"
    if not path.exists():
        return False
    with open(path, newline="") as f:
        steps = [row["step"] for row in csv.DictReader(f)]
    return bool(steps) and int(steps[-1]) >= spec.steps


def command(spec: RunSpec, runs_dir: Path, data_dir: Path | None) -> list[str]:
    args = [sys.executable, "-m", "apps.train", *(str(REPO / b) for b in spec.variant.task.base)]
    for value in overrides(spec.variant, spec.seed, spec.quick, runs_dir, data_dir):
        args += ["-o", value]
    return args


def run(spec: RunSpec, runs_dir: Path, data_dir: Path | None, timeout: float) -> str | None:
    """Train one run; None on success, else the reason it failed (its output is in run.log)."""
    directory = spec.directory(runs_dir)
    shutil.rmtree(directory, ignore_errors=True)  # a killed attempt's files: apps.train refuses to replace them
    directory.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")  # 4 ranks share the cores: no OpenMP oversubscription
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    with open(directory / "run.log", "w") as log:
        try:
            proc = subprocess.run(
                command(spec, runs_dir, data_dir),
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout:.0f}s"
    if proc.returncode != 0:
        return f"exit code {proc.returncode} (see {directory / 'run.log'})"
    if not finished(spec, runs_dir):
        return f"no final evaluation at step {spec.steps} in {directory / 'eval.csv'}"
    return None


def run_all(specs: list[RunSpec], runs_dir: Path, data_dir: Path | None, timeout: float) -> dict[str, str]:
    """Train every spec not yet finished, in order; returns {run name: error} of those that failed."""
    errors: dict[str, str] = {}
    todo = [s for s in specs if not finished(s, runs_dir)]
    print(
        f"reproduce: {len(specs) - len(todo)} of {len(specs)} runs already done, {len(todo)} to train",
        file=sys.stderr,
        flush=True,
    )
    for i, spec in enumerate(todo, 1):
        tic = time.time()
        error = run(spec, runs_dir, data_dir, timeout)
        name = spec.directory(runs_dir).name
        print(f"[{i}/{len(todo)}] {name}: {error or 'ok'} ({time.time() - tic:.0f}s)", file=sys.stderr, flush=True)
        if error:
            errors[name] = error
    return errors
