"""`scripts/gpu_check.sh [--dry-run] [--budget SECONDS] [--phases LIST] [RESULTS_DIR]` (docs/gpu.md).

On a one-GPU machine: install the carried wheels (.whl/), build pycomm for sm_90 with all cores, then run
the phases of phases.py in order, each timed, under a time limit and skipped once the budget is spent; a
failing phase never stops the later ones. Results go to RESULTS_DIR ($OUT when set, else ./gpu-results).
--dry-run checks, without a GPU, that everything the real run names exists and resolves (dry_run.py).

Exit code: 0 every step passed, 1 a step failed, 2 bad arguments, 3 nothing failed but the budget ran out."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

from scripts.gpu_check import machine, pytest_phase, results_folder
from scripts.gpu_check.phases import BUILD, MPI, PHASES, Phase, by_name
from scripts.gpu_check.step_runner import FAILED, PASSED, SKIPPED, Budget, Result, run_command, skip_reason

DEFAULT_BUDGET_S = 360  # everything, the build included: the device allowance is 15 minutes with the machine's start
SETUP_FLOOR_S, BUILD_FLOOR_S, BUILD_LIMIT_S = 5, 30, 240


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=__doc__.splitlines()[2].strip())
    p.add_argument("results", nargs="?", type=Path, help="results folder (default: $OUT, else ./gpu-results)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check without a GPU that everything the run names exists, is collected and resolves",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for everything, the build included (default {DEFAULT_BUDGET_S})",
    )
    p.add_argument("--phases", help=f"comma-separated subset of {','.join(ph.name for ph in PHASES)} (default all)")
    args = p.parse_args(argv)
    if args.budget < 0:
        p.error(f"--budget must be >= 0 seconds, got {args.budget:g}")
    try:
        args.selected = by_name(args.phases)
    except ValueError as e:
        p.error(str(e))
    return args


def say(text: str) -> None:
    print(f"[gpu_check +{dt.datetime.now():%H:%M:%S}] {text}", flush=True)


class Check:
    """One run on the GPU machine: its budget, working folder, environment and the steps' results."""

    def __init__(self, budget_s: float, results_dir: Path) -> None:
        self.budget = Budget(budget_s)
        self.results_dir = results_dir
        self.work = Path(tempfile.mkdtemp(prefix="pycomm-gpu-check-"))
        self.logs = self.work / "logs"
        self.prefix = self.work / "wheels"
        self.env = machine.step_env(self.prefix)
        self.have: set[str] = set()
        self.results: list[Result] = []
        self.header = [
            f"pycomm scripts/gpu_check.sh on {os.uname().nodename}, "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}"
        ]

    def record(self, r: Result) -> None:
        self.results.append(r)
        counts = (
            ""
            if r.counts is None
            else " ({passed} passed, {failed} failed, {errors} errors, {skipped} skipped)".format(**r.counts)
        )
        say(f"{r.name}: {r.status} in {r.seconds:.1f} s{counts}{': ' + r.note if r.note else ''}")
        if r.status == FAILED and r.log is not None and r.log.exists():
            print("\n".join(r.log.read_text(errors="replace").splitlines()[-25:]), flush=True)

    def commands(self, name: str, steps: list[tuple[list[str], float]]) -> tuple[bool, float, str]:
        """Run (argv, limit) in order into logs/<name>.log until one fails: (all ok, seconds, why not)."""
        seconds = 0.0
        for argv, limit in steps:
            out = run_command(
                argv, self.logs / f"{name}.log", min(limit, max(self.budget.left(), 1)), self.env, machine.ROOT
            )
            seconds += out.seconds
            if out.returncode != 0:
                why = "killed at its time limit" if out.returncode is None else f"exit {out.returncode}"
                return False, seconds, f"{Path(argv[0]).name} {' '.join(argv[1:3])}...: {why}"
        return True, seconds, ""

    def setup(self) -> None:
        log = self.logs / "setup.log"
        why = skip_reason(self.budget, SETUP_FLOOR_S, frozenset(), self.have)
        if why:
            return self.record(Result("setup", SKIPPED, note=why))
        self.logs.mkdir(parents=True, exist_ok=True)
        why = machine.gpu_visible(self.env)
        if why:
            log.write_text(why + "\n")
            return self.record(Result("setup", FAILED, note=why, log=log))
        self.have.add("gpu")
        wheels = sorted(machine.WHEELS_DIR.glob("*.whl"))
        if not wheels:
            ok, seconds, why = (
                False,
                0.0,
                (
                    f"no wheels in {machine.WHEELS_DIR} (run scripts/gpu_wheels.sh there "
                    "and carry .whl): no MPI, so the MPI phases are skipped"
                ),
            )
            log.write_text(why + "\n")
        else:
            ok, seconds, why = self.commands("setup", [(machine.install_wheels_argv(self.prefix), 120)])
            self.env = machine.step_env(self.prefix)  # now with what the wheels installed (MPI4PY_LIBMPI)
        if ok:
            more_ok, more_s, why = self.commands(
                "setup",
                [
                    (["mpirun", "--version"], 30),
                    ([sys.executable, "-c", machine.MPI_CHECK], 60),
                    (
                        [
                            "mpirun",
                            "-n",
                            "2",
                            "--oversubscribe",
                            "--allow-run-as-root",
                            sys.executable,
                            "-c",
                            "from mpi4py import MPI; c = MPI.COMM_WORLD; assert c.allreduce(1) == 2; print('rank', c.rank, 'ok')",
                        ],
                        60,
                    ),
                ],
            )
            ok, seconds = more_ok, seconds + more_s
        if ok:
            self.have.add(MPI)
        self.header += machine.facts(self.env)
        note = f"wheels: {', '.join(w.name.split('-')[0] + '-' + w.name.split('-')[1] for w in wheels)}" if ok else why
        self.record(Result("setup", PASSED if ok else FAILED, seconds, note, log=log))

    def build(self) -> None:
        why = skip_reason(self.budget, BUILD_FLOOR_S, frozenset({"gpu"}), self.have)
        if why:
            return self.record(Result("build", SKIPPED, note=why))
        mpi = machine.mpicc(self.prefix) if MPI in self.have else None
        ok, seconds, why = self.commands(
            "build",
            [
                (machine.configure_argv(machine.BUILD_DIR, mpi), 120),
                (machine.build_argv(machine.BUILD_DIR), BUILD_LIMIT_S),
                ([sys.executable, "-c", machine.BUILD_INFO_CHECK, "mpi" if mpi else "no-mpi"], 60),
            ],
        )
        log = self.logs / "build.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        self.header += [line for line in lines if line.startswith("build_info:")][-1:]
        lacks = [line for line in lines if line.startswith("build lacks:")][-1:]
        if ok:
            self.have.add(BUILD)
        note = f"sm_{machine.CUDA_ARCHS}, {os.cpu_count()} jobs" + (f"; {lacks[0]}" if lacks else "") if ok else why
        self.record(Result("build", PASSED if ok else FAILED, seconds, note, log=log))

    def phase(self, ph: Phase) -> None:
        why = skip_reason(self.budget, ph.floor_s, ph.needs, self.have)
        if why:
            return self.record(Result(ph.name, SKIPPED, note=why))
        limit = min(ph.limit_s, self.budget.left())
        say(f"{ph.name}: start (limit {limit:.0f} s, {self.budget.left():.0f} s of the budget left): {ph.covers}")
        log = self.logs / f"{ph.name}.log"
        if ph.tests:
            xml = self.logs / f"{ph.name}.xml"
            argv = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rfEs",
                "-p",
                "no:cacheprovider",
                "-m",
                "gpu",
                # thread: a test hung in C++ (NCCL, a CUDA sync) never returns to Python for the signal
                # method to stop it; this one ends the process, and pytest_phase goes on after that test
                f"--timeout={ph.test_limit_s}",
                "--timeout-method=thread",
                *([f"--maxfail={ph.maxfail}"] if ph.maxfail else []),
            ]
            run = pytest_phase.run(argv, ph.tests, log, xml, limit, self.env, machine.ROOT)
            counts = results_folder.junit_counts(xml)
            status, note = results_folder.status_of(run.returncode, counts)
            note = ", ".join(filter(None, [note, run.note()]))
            texts = [log.read_text(errors="replace"), *results_folder.junit_outputs(xml)]
            return self.record(
                Result(
                    ph.name,
                    status,
                    run.seconds,
                    note,
                    counts,
                    log,
                    xml if counts else None,
                    results_folder.findings(texts),
                )
            )
        argv = [a.format(python=sys.executable, results=self.results_dir) for a in ph.command]
        for f in ph.outputs:  # what an earlier run left must not pass for this one's
            (self.results_dir / f).unlink(missing_ok=True)
        out = run_command(argv, log, limit, self.env, machine.ROOT)
        missing = [f for f in ph.outputs if not (self.results_dir / f).exists()]
        if out.returncode is None:
            status, note = FAILED, "killed at its time limit"
        elif out.returncode != 0:
            status, note = FAILED, f"exit {out.returncode}"
        elif missing:
            status, note = FAILED, f"wrote no {', '.join(missing)}"
        else:
            status, note = PASSED, ""
        self.record(
            Result(
                ph.name,
                status,
                out.seconds,
                note,
                None,
                log,
                None,
                results_folder.findings([log.read_text(errors="replace")]),
            )
        )

    def run(self, phases: tuple[Phase, ...]) -> int:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        say(f"budget {self.budget.seconds:.0f} s; results in {self.results_dir}; logs in {self.logs}")
        self.setup()
        self.build()
        for ph in phases:
            self.phase(ph)
        text = results_folder.write(
            self.results_dir, self.header, self.results, self.budget.seconds, self.budget.used(), self.logs
        )
        print("\n" + text, flush=True)
        return results_folder.exit_code(self.results)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        from scripts.gpu_check import dry_run

        return dry_run.main(args.selected)
    out = os.environ.get("OUT")
    results = args.results or (Path(out) if out else machine.ROOT / "gpu-results")
    return Check(args.budget, results.resolve()).run(args.selected)


if __name__ == "__main__":
    sys.exit(main())
