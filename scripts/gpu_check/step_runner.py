"""The time budget and the running of one step: a command under a time limit, its output in a log file,
killed with every process it started (mpirun's ranks, spawned workers) when the limit passes, so that no
step can hang the run. A step that cannot start in the budget left is recorded as skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
KILL_GRACE_S = 10  # between SIGTERM and SIGKILL of a step past its limit


class Budget:
    """Seconds left of a budget that started when this was made."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self._clock, self._start = seconds, clock, clock()

    def used(self) -> float:
        return self._clock() - self._start

    def left(self) -> float:
        return self.seconds - self.used()


@dataclass
class Result:
    """How one step ended. counts: pytest's (tests, passed, failed, errors, skipped), None for a command."""

    name: str
    status: str
    seconds: float = 0.0
    note: str = ""
    counts: dict[str, int] | None = None
    log: Path | None = None
    junit: Path | None = None
    findings: list[str] = field(default_factory=list)  # GPU-RESULT lines the step printed


@dataclass
class Outcome:
    returncode: int | None  # None: killed at its time limit
    seconds: float


def run_command(
    argv: Sequence[str], log: Path, limit_s: float, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Outcome:
    """Run argv with stdout and stderr into `log`, in a process group of its own; past limit_s seconds
    SIGTERM the group, then SIGKILL it. Whatever the group left behind is killed in the end too."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as e:
            out.write(f"cannot start: {e}\n".encode())
            return Outcome(127, time.monotonic() - t0)
        try:
            code: int | None = proc.wait(timeout=max(limit_s, 0.1))
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            code = None
            out.write(f"\n[gpu_check] killed after its time limit of {limit_s:.0f} s\n".encode())
        finally:
            _signal_group(proc.pid, signal.SIGKILL)  # daemons and workers it left running
    return Outcome(code, time.monotonic() - t0)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def skip_reason(budget: Budget, floor_s: float, needs: frozenset[str], have: set[str]) -> str:
    """Why a step must be skipped now ("" when it may run): a need not met, or too little budget left."""
    missing = sorted(needs - have)
    if missing:
        return f"needs {', '.join(missing)}, which an earlier step did not provide"
    left = budget.left()
    if left < floor_s:
        return f"budget: {max(left, 0):.0f} s left, the phase needs at least {floor_s:.0f} s"
    return ""
