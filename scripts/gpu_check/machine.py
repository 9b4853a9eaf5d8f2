"""The GPU machine's side of the check: the carried wheels installed offline into a prefix of their own,
the environment every step runs in, the CMake line of the sm_90 build (shared with the dry run), and one
line per fact about the machine for the summary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parents[2]
WHEELS_DIR = ROOT / ".whl"  # filled here by scripts/gpu_wheels.sh, carried to the GPU machine
WHEEL_LIST = ROOT / "scripts" / "gpu_wheels.txt"
IMAGE_PACKAGES = ROOT / "scripts" / "gpu_image_packages.txt"
BUILD_DIR = ROOT / "build" / "gpu-sm90"
CUDA_ARCHS = "90"  # H100 / H200: sm_90 only (docs/gpu.md)
ROOT_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # commands run as root


def listed(path: Path) -> list[str]:
    """The entries of a list file (one a line; '#' starts a comment)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def site_packages(prefix: Path) -> Path:
    """Where `pip install --prefix` puts this Python's packages."""
    return Path(sysconfig.get_path("purelib", "posix_prefix", vars={"base": str(prefix), "platbase": str(prefix)}))


def wheel_env(prefix: Path, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the wheels installed under `prefix` first on every path: their mpirun/mpicc, libmpi,
    and Python packages (pip --target would drop the MPI wheel's lib/ folder, so it is a prefix)."""
    env = dict(base)
    lib = prefix / "lib"

    def first(key: str, value: Path) -> None:
        env[key] = os.pathsep.join(filter(None, [str(value), env.get(key, "")]))

    first("PATH", prefix / "bin")
    first("LD_LIBRARY_PATH", lib)
    first("PYTHONPATH", site_packages(prefix))
    libmpi = lib / "libmpi.so.40"
    if libmpi.exists():
        env["MPI4PY_LIBMPI"] = str(libmpi)  # mpi4py's ABI-neutral wheel loads exactly this MPI
    return env


def step_env(prefix: Path) -> dict[str, str]:
    """The environment of every step: the wheels, the checkout on PYTHONPATH, unbuffered Python, root's
    permission for Open MPI."""
    env = wheel_env(prefix, os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(ROOT_MPI_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def install_wheels_argv(prefix: Path) -> list[str]:
    wheels = sorted(str(p) for p in WHEELS_DIR.glob("*.whl"))
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--prefix",
        str(prefix),
        *wheels,
    ]


def mpicc(prefix: Path) -> Path | None:
    """The carried MPI's compiler wrapper, else one on PATH (None: no MPI here)."""
    carried = prefix / "bin" / "mpicc"
    if carried.exists():
        return carried
    found = shutil.which("mpicc")
    return Path(found) if found else None


def configure_argv(build_dir: Path, mpi_compiler: Path | None, python: str = sys.executable) -> list[str]:
    """The CMake configure line of the GPU build: CUDA kernels for sm_90 only (required), NCCL (the
    nvidia-nccl-cu13 wheel) and NVTX when found (auto: a missing one fails its phases, not the build every
    phase needs; the dry run checks both are found where CI configures it), and MPI through `mpi_compiler`
    (off when there is none)."""
    argv = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build_dir),
        "-GNinja",
        f"-DPython_EXECUTABLE={python}",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DPYCOMM_CUDA=on",
        "-DPYCOMM_HIP=off",
        f"-DPYCOMM_CUDA_ARCHS={CUDA_ARCHS}",
        "-DPYCOMM_NCCL=auto",
        "-DPYCOMM_NVTX=auto",
    ]
    if mpi_compiler is not None:
        argv += ["-DPYCOMM_MPI=on", f"-DMPI_C_COMPILER={mpi_compiler}"]
    else:
        argv += ["-DPYCOMM_MPI=off"]
    return argv


def build_argv(build_dir: Path) -> list[str]:
    return ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 1)]


# Run after the build: the module must have CUDA kernels for sm_90 (and MPI when asked); it says what else
# it lacks (the phases that need it then fail with the reason).
BUILD_INFO_CHECK = f"""
import json, sys
import pycomm
info = pycomm.build_info()
print("build_info:", json.dumps(info, sort_keys=True))
want = {{"cuda": True, "gpu_archs": "{CUDA_ARCHS}"}}
if sys.argv[1] == "mpi":
    want["mpi"] = True
bad = {{k: info.get(k) for k, v in want.items() if info.get(k) != v}}
lacks = [k for k in ("nccl", "nvtx", "mpi") if not info.get(k)]
if lacks:
    print("build lacks:", ", ".join(lacks))
sys.exit(f"the build lacks what every GPU phase needs: {{bad}} (wanted {{want}})" if bad else 0)
"""

# Run after installing the wheels: the carried MPI starts 2 ranks as root and mpi4py loads it.
MPI_CHECK = """
import mpi4py
mpi4py.rc.initialize = False
from mpi4py import MPI
print("mpi4py", mpi4py.__version__, "loads:", MPI.Get_library_version().splitlines()[0])
"""

FACTS = """
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"gpu0 {p.name}: sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")
else:
    print("gpu: torch sees none")
"""


def facts(env: Mapping[str, str]) -> list[str]:
    """One line per fact about the machine (what could not be read says so)."""
    out = []
    for label, argv in (
        ("nvidia-smi", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
        ("nvcc", ["nvcc", "--version"]),
        ("torch", [sys.executable, "-c", FACTS]),
        ("mpirun", ["mpirun", "--version"]),
    ):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(env))
            text = (p.stdout or p.stderr).strip().splitlines()
            keep = [t for t in text if "release" in t] if label == "nvcc" else text[:2]
            out.append(f"{label}: {' | '.join(keep) or f'exit {p.returncode}'}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"{label}: not available ({e.__class__.__name__})")
    out.append(f"nvcc at {shutil.which('nvcc', path=env.get('PATH'))}; cpus: {os.cpu_count()}")
    return out


def gpu_visible(env: Mapping[str, str]) -> str:
    """ "" when nvidia-smi lists a GPU, else why not."""
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return "nvidia-smi is not on PATH: this is not a GPU machine (run scripts/gpu_check.sh --dry-run here)"
    p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, env=dict(env))
    if p.returncode != 0 or "GPU 0" not in p.stdout:
        return f"nvidia-smi -L lists no GPU: {(p.stdout + p.stderr).strip()[:300]}"
    return ""
