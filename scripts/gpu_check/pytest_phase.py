"""A pytest phase that a crash cannot cut short. pytest runs with the progress plugin (pytest_progress.py);
when its process dies inside a test (a segfault in the core kills the interpreter, pytest's JUnit file with
it), that test is recorded as crashed, and the tests not yet run go on in a new pytest process (every test
already finished or crashed deselected), until all ran, the time limit passes or MAX_ROUNDS processes were
used. The phase's JUnit file is built from the progress records of every round (with each test's captured
output, so GPU-RESULT lines survive a crash after them)."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from scripts.gpu_check.pytest_progress import DONE_ENV, ENV
from scripts.gpu_check.step_runner import run_command

PLUGIN = "scripts.gpu_check.pytest_progress"
MAX_ROUNDS = 8  # pytest processes per phase: at most MAX_ROUNDS - 1 crashes are survived
PYTEST_EXITS = range(6)  # pytest's own exit codes; anything else is a dead process (-11: SIGSEGV)
CRASH_LOG_LINES = 60


@dataclass
class PhaseRun:
    returncode: int | None  # 1 when a test crashed, else the last pytest's; None: killed at the time limit
    seconds: float
    rounds: int
    crashed: list[str] = field(default_factory=list)  # "nodeid (exit -11)", in order
    killed_in: str = ""  # the test running when the time limit passed

    def note(self) -> str:
        """What the summary adds to the phase's status (crashes and restarts; "" when there were none)."""
        parts = []
        if self.crashed:
            parts.append(
                f"{len(self.crashed)} test(s) crashed pytest, the rest ran on in {self.rounds} processes: "
                + "; ".join(self.crashed)
            )
        if self.killed_in:
            parts.append(f"killed in {self.killed_in}")
        return ", ".join(parts)


@dataclass
class Progress:
    """What the progress records of every round say so far."""

    collected: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    ended: set[str] = field(default_factory=set)
    reports: dict[str, list[dict]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> "Progress":
        p = cls()
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        for line in lines:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line the crash cut short
            if "collected" in r:
                p.collected = p.collected or r["collected"]  # the first round's: every test of the phase
            elif "start" in r:
                p.started.append(r["start"])
            elif "end" in r:
                p.ended.add(r["end"])
            else:
                p.reports.setdefault(r["nodeid"], []).append(r)
        return p

    def running(self) -> list[str]:
        return [n for n in self.started if n not in self.ended]


def run(
    argv: Sequence[str], paths: Sequence[str], log: Path, junit: Path, limit_s: float, env: Mapping[str, str], cwd: Path
) -> PhaseRun:
    """`python -m pytest <argv> <paths>` in as many rounds as crashes need; writes `junit`."""
    progress_file = log.with_name(log.stem + ".progress.jsonl")
    done_file = log.with_name(log.stem + ".done")
    progress_file.unlink(missing_ok=True)
    t0 = time.monotonic()
    crashed: dict[str, str] = {}  # nodeid -> why
    result = PhaseRun(None, 0.0, 0)
    while result.rounds < MAX_ROUNDS:
        result.rounds += 1
        progress = Progress.read(progress_file)
        done_file.write_text("".join(f"{n}\n" for n in sorted(progress.ended | set(crashed))))
        log_start = log.stat().st_size if log.exists() else 0
        out = run_command(
            [*argv, "-p", PLUGIN, *paths],
            log,
            max(limit_s - (time.monotonic() - t0), 1),
            {**env, ENV: str(progress_file), DONE_ENV: str(done_file)},
            cwd,
        )
        progress = Progress.read(progress_file)
        running = [n for n in progress.running() if n not in crashed]
        if out.returncode is None:
            result.killed_in = running[-1] if running else ""
            break
        if out.returncode in PYTEST_EXITS and not running:
            result.returncode = 1 if crashed else out.returncode
            break
        # the process died (a signal, or os._exit in a test): in the test it had started last, or outside any
        # test (then nothing can go on)
        where = running[-1] if running else f"pytest (outside any test) in round {result.rounds}"
        crashed[where] = (
            f"the test process died with exit {out.returncode} while running it; the end of its log:\n"
            + tail(log, log_start, CRASH_LOG_LINES)
        )
        result.crashed.append(f"{where} (exit {out.returncode})")
        result.returncode = 1
        left = set(progress.collected) - progress.ended - set(crashed)
        if not running or not left:
            break
    result.seconds = time.monotonic() - t0
    write_junit(junit, Progress.read(progress_file), crashed, result.killed_in)
    return result


def tail(log: Path, start: int, lines: int) -> str:
    """The last `lines` lines of what `log` got from byte `start` on."""
    with open(log, "rb") as f:
        f.seek(start)
        return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


def write_junit(path: Path, progress: Progress, crashed: Mapping[str, str], killed_in: str) -> None:
    """One <testsuite> of every test that reported, crashed or was cut off, in the order they ran."""
    order = list(dict.fromkeys([*progress.started, *progress.reports, *crashed]))
    suite = ET.Element("testsuite", name="pytest")
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    total = 0.0
    for nodeid in order:
        reports = progress.reports.get(nodeid, [])
        seconds = sum(r["duration"] for r in reports)
        total += seconds
        parts = nodeid.split("::")
        case = ET.SubElement(
            suite,
            "testcase",
            classname=".".join([parts[0].removesuffix(".py").replace("/", "."), *parts[1:-1]]),
            name=parts[-1],
            time=f"{seconds:.3f}",
        )
        failed = [r for r in reports if r["outcome"] == "failed"]
        counts["tests"] += 1
        if nodeid in crashed or nodeid == killed_in:
            why = crashed.get(nodeid) or "killed at the phase's time limit while running it"
            ET.SubElement(case, "failure", message=why.splitlines()[0]).text = why
            counts["failures"] += 1
        elif failed:
            kind = "failure" if failed[0]["when"] == "call" else "error"
            text = failed[0]["text"]
            ET.SubElement(case, kind, message=(text.strip().splitlines() or [kind])[-1][:300]).text = text
            counts["failures" if kind == "failure" else "errors"] += 1
        elif any(r["outcome"] == "skipped" for r in reports):
            reason = next(r["text"] for r in reports if r["outcome"] == "skipped")
            ET.SubElement(case, "skipped", message=reason[:300])
            counts["skipped"] += 1
        if reports and reports[-1]["stdout"]:
            ET.SubElement(case, "system-out").text = reports[-1]["stdout"]
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{total:.3f}")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
