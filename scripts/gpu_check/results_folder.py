"""What the GPU check leaves in its results folder (at most 8 files, none in subfolders):
summary.txt       the machine, then each step: status, test counts, seconds, and what it measured
junit.xml         every pytest phase's test suite, plus one suite per other step, merged
failures.log      the tail of each failed step's log
logs.tar.gz       every step's whole log
kernels_gpu.json, kernels_gpu.png   the benchmark (written by the bench phase itself)"""

from __future__ import annotations

import re
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable, Sequence

from scripts.gpu_check.step_runner import FAILED, PASSED, SKIPPED, Result

SUMMARY, JUNIT, FAILURES, LOGS = "summary.txt", "junit.xml", "failures.log", "logs.tar.gz"
FAILURE_TAIL_LINES = 400
FINDING = re.compile(r"GPU-RESULT: (.*)")  # a line a test or benchmark prints for the summary
COUNT_KEYS = ("tests", "passed", "failed", "errors", "skipped")


def junit_counts(path: Path) -> dict[str, int] | None:
    """Test counts of a pytest JUnit file (None when it is missing or unreadable, e.g. pytest was killed)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for s in suites:
        for key, attr in (("tests", "tests"), ("failed", "failures"), ("errors", "errors"), ("skipped", "skipped")):
            counts[key] += int(s.get(attr, 0))
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def junit_outputs(path: Path) -> list[str]:
    """The captured stdout of every test case in a JUnit file (pytest -o junit_logging=system-out)."""
    try:
        return [e.text or "" for e in ET.parse(path).getroot().iter("system-out")]
    except (OSError, ET.ParseError):
        return []


def findings(texts: Iterable[str]) -> list[str]:
    """The GPU-RESULT lines in `texts`, each once, in order."""
    seen: list[str] = []
    for text in texts:
        for m in FINDING.finditer(text):
            line = m.group(1).strip()
            if line not in seen:
                seen.append(line)
    return seen


def merged_junit(results: Sequence[Result]) -> ET.Element:
    """One <testsuites>: each pytest phase's suites as pytest wrote them; a step without a JUnit file (build,
    benchmark, a skipped or killed phase) as a suite of one test case carrying its status."""
    root = ET.Element("testsuites", name="pycomm gpu_check")
    for r in results:
        suites = []
        if r.junit is not None and r.counts is not None:
            tree = ET.parse(r.junit).getroot()
            suites = [tree] if tree.tag == "testsuite" else tree.findall("testsuite")
        for s in suites:
            s.set("name", f"gpu_check.{r.name}")
            root.append(s)
        # a failure the suites do not show (every test skipped, say) gets a test case of its own
        shown = r.counts is not None and (r.counts["failed"] or r.counts["errors"])
        if not suites or (r.status == FAILED and not shown):
            root.append(_step_suite(r))
    return root


def _step_suite(r: Result) -> ET.Element:
    suite = ET.Element(
        "testsuite",
        name=f"gpu_check.{r.name}.step",
        tests="1",
        time=f"{r.seconds:.3f}",
        failures=str(int(r.status == FAILED)),
        errors="0",
        skipped=str(int(r.status == SKIPPED)),
    )
    case = ET.SubElement(suite, "testcase", classname="gpu_check", name=r.name, time=f"{r.seconds:.3f}")
    if r.status == FAILED:
        failure = ET.SubElement(case, "failure", message=r.note or "failed")
        failure.text = _tail(r.log, 60)
    elif r.status == SKIPPED:
        ET.SubElement(case, "skipped", message=r.note)
    if r.findings:
        ET.SubElement(case, "system-out").text = "\n".join(r.findings)
    return suite


def _tail(log: Path | None, lines: int) -> str:
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def summary(header: Sequence[str], results: Sequence[Result], budget_s: float, used_s: float) -> str:
    rows = [("step", "status", "tests", "passed", "failed", "errors", "skipped", "seconds", "note")]
    for r in results:
        c = r.counts or {}
        rows.append((r.name, r.status, *(str(c[k]) if k in c else "-" for k in COUNT_KEYS), f"{r.seconds:.1f}", r.note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows]
    failed = [r.name for r in results if r.status == FAILED]
    skipped = [r.name for r in results if r.status == SKIPPED]
    verdict = (
        "FAILED: " + ", ".join(failed)
        if failed
        else "INCOMPLETE: skipped " + ", ".join(skipped)
        if skipped
        else "PASSED: every step"
    )
    lines = [*header, f"budget {budget_s:.0f} s, used {used_s:.0f} s", "", *table, "", f"overall: {verdict}"]
    measured = [(r.name, f) for r in results for f in r.findings]
    if measured:
        lines += ["", "measured:"] + [f"  [{name}] {f}" for name, f in measured]
    return "\n".join(lines) + "\n"


def exit_code(results: Sequence[Result]) -> int:
    """0: every step passed; 1: a step failed; 3: none failed but some were skipped (the budget ran out)."""
    if any(r.status == FAILED for r in results):
        return 1
    return 3 if any(r.status == SKIPPED for r in results) else 0


def write(
    results_dir: Path, header: Sequence[str], results: Sequence[Result], budget_s: float, used_s: float, log_dir: Path
) -> str:
    """Write summary, JUnit, failure tails and the log archive into results_dir; returns the summary."""
    results_dir.mkdir(parents=True, exist_ok=True)
    text = summary(header, results, budget_s, used_s)
    # an unreadable JUnit file (a phase killed while writing it) must not lose the rest of the report
    for r in results:
        if r.junit is not None and junit_counts(r.junit) is None:
            r.junit = None
    (results_dir / SUMMARY).write_text(text)
    ET.ElementTree(merged_junit(results)).write(results_dir / JUNIT, encoding="utf-8", xml_declaration=True)
    failed = [r for r in results if r.status == FAILED]
    parts = [
        f"==== {r.name}: {r.note} (last {FAILURE_TAIL_LINES} lines of its log) ====\n"
        f"{_tail(r.log, FAILURE_TAIL_LINES)}\n"
        for r in failed
    ]
    (results_dir / FAILURES).write_text("".join(parts) if parts else "no step failed\n")
    logs = sorted(p for p in log_dir.glob("*") if p.is_file()) if log_dir.exists() else []
    with tarfile.open(results_dir / LOGS, "w:gz") as tar:
        for p in logs:
            tar.add(p, arcname=f"logs/{p.name}")
    return text


def status_of(returncode: int | None, counts: dict[str, int] | None) -> tuple[str, str]:
    """(status, note) of a pytest phase: passed only when pytest exited 0 and some test passed (a phase
    whose every test was skipped on the GPU machine proves nothing)."""
    if returncode is None:
        return FAILED, "killed at its time limit"
    if counts is None:
        return FAILED, f"pytest exited {returncode} without a JUnit file"
    if returncode != 0 or counts["failed"] or counts["errors"]:
        return FAILED, f"pytest exited {returncode}"
    if counts["passed"] == 0:
        return FAILED, f"no test ran: all {counts['skipped']} skipped (see the log's skip reasons)"
    return PASSED, ""
