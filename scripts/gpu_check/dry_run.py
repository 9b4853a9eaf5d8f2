"""`scripts/gpu_check.sh --dry-run`: what can be checked without a GPU, so the day a GPU is at hand nothing
fails for a missing file, a test that is not collected, a wheel that does not resolve, or a CMake line that
CMake rejects. Checks (CMake and pip run in the background while pytest collects):
  - every phase's test paths exist, each collects tests marked gpu, and every test file that uses the
    marker lies in some phase (so a new GPU test cannot be left out of the run);
  - what the phase tests and the programs they start import is on the GPU image or in the wheel list;
  - the bench command's arguments parse;
  - the wheel list resolves for CPython 3.12 on x86-64, its dependencies covered (needs PyPI);
  - CMake accepts the configure line of the real run (PYCOMM_CUDA=on, PYCOMM_CUDA_ARCHS=90, NCCL, NVTX, MPI);
    configure only: scripts/gpu_compile_check.sh compiles the CUDA build in CI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from scripts.gpu_check import machine, wheels
from scripts.gpu_check.phases import Phase

DRY_BUILD = machine.ROOT / "build" / "gpu-check-dry"
MARKER_USE = re.compile(r"pytest\.mark\.gpu\b")
WORKER_MODULE = re.compile(r"[\"']((?:tests|apps|benchmarks|algorithms)(?:\.\w+)+)[\"']")
LOCAL = {"pycomm", "algorithms", "apps", "benchmarks", "tests", "scripts"}
# imported only when installed (try: import ...), by what no GPU phase needs
OPTIONAL = {"pydot": "torch.fx's graph drawer", "zmq": "algorithms/ps/wire.py: the parameter-server algorithms"}
RESULT_MARK = "GPU_CHECK_COLLECTED "

# Run in a fresh interpreter: collect the phases' GPU tests, import the modules the tests start in processes
# of their own, parse the commands' arguments, then name the distributions of everything imported.
COLLECT = (
    r"""
import importlib, importlib.metadata as md, json, sys
import pytest
paths, modules, parses = json.loads(sys.argv[1])
class Collector:
    ids = []
    def pytest_collection_finish(self, session):
        Collector.ids = [item.nodeid for item in session.items]
rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "scripts.gpu_check.pytest_progress",
                  "-m", "gpu", *paths], plugins=[Collector()])
errors = []
for m in modules:
    try:
        importlib.import_module(m)
    except Exception as e:
        errors.append(f"import {m}: {type(e).__name__}: {e}")
for module, args in parses:
    try:
        importlib.import_module(module)._parse(args)
    except BaseException as e:
        errors.append(f"{module} {' '.join(args)}: {type(e).__name__}: {e}")
owners = md.packages_distributions()
tops = {name.split(".")[0] for name in list(sys.modules)} - set(sys.stdlib_module_names)
used = {top: owners.get(top, []) for top in sorted(tops)}
print("""
    + repr(RESULT_MARK)
    + r""" + json.dumps({"rc": int(rc), "ids": Collector.ids, "errors": errors, "used": used}))
"""
)


def phase_of(nodeid: str, phases: Sequence[Phase]) -> str | None:
    path = nodeid.split("::", 1)[0]
    for ph in phases:
        if any(path == t or path.startswith(t.rstrip("/") + "/") for t in ph.tests):
            return ph.name
    return None


def marker_files() -> list[str]:
    """Test files (conftests included) that put the gpu marker on tests."""
    tests = machine.ROOT / "tests"
    return sorted(str(p.relative_to(machine.ROOT)) for p in tests.rglob("*.py") if MARKER_USE.search(p.read_text()))


def started_modules(phases: Sequence[Phase]) -> list[str]:
    """Modules the phases' tests run in processes of their own (named as strings in the test files)."""
    found = {"apps.train"}
    for ph in phases:
        for t in ph.tests:
            path = machine.ROOT / t
            for f in [path] if path.is_file() else sorted(path.rglob("test_*.py")):
                found.update(
                    m
                    for m in WORKER_MODULE.findall(f.read_text())
                    if (machine.ROOT / (m.replace(".", "/") + ".py")).exists()
                )
    return sorted(found)


def command_parses(phases: Sequence[Phase]) -> list[tuple[str, list[str]]]:
    """(module, its arguments) of each `{python} -m module args` command phase."""
    out = []
    for ph in phases:
        if ph.command[:2] == ("{python}", "-m"):
            args = [a.format(results="/tmp/gpu-check-dry-run") for a in ph.command[3:]]
            out.append((ph.command[2], args))
    return out


def check_collection(phases: Sequence[Phase]) -> list[str]:
    problems = []
    paths = [t for ph in phases for t in ph.tests]
    for t in paths:
        if not (machine.ROOT / t).exists():
            problems.append(f"{t}: named by a phase but missing")
    for f in marker_files():
        if phase_of(f, phases) is None:
            problems.append(f"{f} marks tests gpu, but no phase runs it (add it to scripts/gpu_check/phases.py)")
    payload = json.dumps(
        [[p for p in paths if (machine.ROOT / p).exists()], started_modules(phases), command_parses(phases)]
    )
    # pytest plugins installed here (not there) stay out: what they import is not what the phases need
    env = {**machine.step_env(DRY_BUILD / "no-wheels"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    p = subprocess.run(
        [sys.executable, "-c", COLLECT, payload], cwd=machine.ROOT, capture_output=True, text=True, timeout=600, env=env
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith(RESULT_MARK)), None)
    if line is None:
        return problems + [
            f"collecting the phases' tests failed ({p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
        ]
    got = json.loads(line[len(RESULT_MARK) :])
    if got["rc"] != 0:
        problems.append(f"pytest --collect-only -m gpu exited {got['rc']}:\n{p.stdout[-3000:]}")
    problems += got["errors"]
    for ph in phases:
        n = sum(phase_of(i, [ph]) == ph.name for i in got["ids"])
        print(f"  {ph.name}: {n} tests marked gpu collected" if ph.tests else f"  {ph.name}: {' '.join(ph.command)}")
        if ph.tests and n == 0:
            problems.append(f"phase {ph.name} collects no test marked gpu from {', '.join(ph.tests)}")
    problems += unavailable(got["used"])
    return problems


def unavailable(used: dict[str, list[str]]) -> list[str]:
    """Imported top-level modules that neither the image nor the wheels provide."""
    have = {wheels.normalized(n) for n in machine.listed(machine.IMAGE_PACKAGES)}
    have |= {wheels.requirement_name(r) for r in machine.listed(machine.WHEEL_LIST)}
    bad = []
    for top, dists in used.items():
        if top in LOCAL or top in OPTIONAL or top.startswith("_") or not dists:
            continue  # ours, optional, private helpers, or of no installed distribution (stdlib extension)
        if not any(wheels.normalized(d) in have for d in dists):
            bad.append(
                f"the GPU phases import {top} ({', '.join(dists)}), which neither the GPU image "
                f"({machine.IMAGE_PACKAGES.name}) nor {machine.WHEEL_LIST.name} provides"
            )
    return bad


def start_configure() -> tuple[subprocess.Popen | None, Path, str]:
    log = DRY_BUILD.parent / "gpu-check-dry.log"
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        return None, log, "no nvcc on this machine: cannot check the CMake line (CI has one)"
    shutil.rmtree(DRY_BUILD, ignore_errors=True)
    DRY_BUILD.mkdir(parents=True)
    mpicc = shutil.which("mpicc")
    argv = machine.configure_argv(DRY_BUILD, Path(mpicc) if mpicc else None)
    out = open(log, "w")
    out.write(" ".join(argv) + "\n")
    out.flush()
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=machine.ROOT), log, ""


def finish_configure(proc: subprocess.Popen | None, log: Path, why: str) -> list[str]:
    if proc is None:
        return [why]
    code = proc.wait(timeout=300)
    text = log.read_text(errors="replace")
    if code != 0:
        return [f"CMake rejected the GPU configure line (exit {code}); {log}:\n{text[-3000:]}"]
    line = next((x for x in text.splitlines() if "pycomm: gpu=" in x), "")
    if "gpu=cuda" not in line or "nccl=ON" not in line or "nvtx=ON" not in line:
        return [f"CMake configured, but not the GPU build the run needs: {line!r}"]
    print(f"  cmake: {' '.join(text.splitlines()[0].split()[:3])} ... accepted: {line.strip(' -')}")
    return []


def main(phases: Sequence[Phase]) -> int:
    t0 = time.monotonic()
    print("gpu_check --dry-run: no GPU needed; checks what the GPU run names")
    configure = start_configure()
    problems: list[str] = []
    resolved: list[str] = []

    import threading

    def resolve() -> None:
        lines, bad = wheels.resolve()
        resolved.extend(lines)
        problems.extend(bad)

    resolver = threading.Thread(target=resolve)
    resolver.start()
    problems += check_collection(phases)
    resolver.join()
    for line in resolved:
        print(f"  wheel for CPython {wheels.PYTHON_VERSION} x86-64: {line}")
    problems += finish_configure(*configure)
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    print(
        f"gpu_check --dry-run: {'FAILED, ' + str(len(problems)) + ' problem(s)' if problems else 'ok'} "
        f"in {time.monotonic() - t0:.1f} s"
    )
    return 1 if problems else 0
