"""cmake/PycommGpuChoice.cmake: PYCOMM_CUDA/PYCOMM_HIP=auto build GPU kernels only for a visible GPU or
an explicit architecture list, never just because a compiler is installed (nvcc in a CPU container
compiled sm_80/sm_90 kernels for minutes). Run in CMake's script mode, with stand-in GPU listers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.launch import ROOT

SCRIPT = ROOT / "cmake" / "PycommGpuChoice.cmake"
H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake here")


def choose(tmp_path: Path, listers: dict[str, tuple[int, str]], **options: str) -> subprocess.CompletedProcess:
    """Run the decision with `listers` (tool name -> exit code, output) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, (code, output) in listers.items():
        path = bin_dir / tool
        path.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
        path.chmod(0o755)
    defines = [f"-D{k}={v}" for k, v in {"PYCOMM_CUDA": "auto", "PYCOMM_HIP": "auto", **options}.items()]
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    return subprocess.run(["cmake", *defines, "-P", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)


def decision(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("pycomm: GPU kernels:"))
    return line


def test_auto_with_nvcc_but_no_gpu_builds_no_kernels_and_says_how_to(tmp_path: Path) -> None:
    line = decision(
        choose(
            tmp_path,
            {"nvidia-smi": (6, "No devices were found"), "rocminfo": (1, "")},
            PYCOMM_NVCC="/opt/cuda/bin/nvcc",
        )
    )
    assert line.startswith("pycomm: GPU kernels: none"), line
    assert "/opt/cuda/bin/nvcc found, but no CUDA GPU is visible" in line, line
    assert "set PYCOMM_CUDA=on or PYCOMM_CUDA_ARCHS" in line, line


def test_auto_with_nvcc_and_a_listed_gpu_builds_cuda(tmp_path: Path) -> None:
    line = decision(choose(tmp_path, {"nvidia-smi": (0, H100)}, PYCOMM_NVCC="/opt/cuda/bin/nvcc"))
    assert line.startswith("pycomm: GPU kernels: cuda"), line
    assert "nvidia-smi lists GPU 0: NVIDIA H100 80GB HBM3" in line, line


def test_auto_with_explicit_archs_builds_cuda_without_a_gpu(tmp_path: Path) -> None:
    line = decision(
        choose(
            tmp_path,
            {"nvidia-smi": (6, "No devices were found")},
            PYCOMM_NVCC="/opt/cuda/bin/nvcc",
            PYCOMM_CUDA_ARCHS="90",
        )
    )
    assert line.startswith("pycomm: GPU kernels: cuda") and "PYCOMM_CUDA_ARCHS=90 given" in line, line


def test_auto_without_a_compiler_builds_none_even_with_a_gpu(tmp_path: Path) -> None:
    line = decision(choose(tmp_path, {"nvidia-smi": (0, H100)}))
    assert line.startswith("pycomm: GPU kernels: none") and "no nvcc found" in line and "no hipcc found" in line


def test_hip_auto_needs_a_listed_gpu_too(tmp_path: Path) -> None:
    with_gpu = decision(
        choose(
            tmp_path, {"nvidia-smi": (6, ""), "rocminfo": (0, "  Name:   gfx90a")}, PYCOMM_HIPCC="/opt/rocm/bin/hipcc"
        )
    )
    assert with_gpu.startswith("pycomm: GPU kernels: hip") and "rocminfo lists gfx90a" in with_gpu, with_gpu
    without = decision(
        choose(
            tmp_path, {"nvidia-smi": (6, ""), "rocminfo": (1, "HSA_STATUS_ERROR")}, PYCOMM_HIPCC="/opt/rocm/bin/hipcc"
        )
    )
    assert without.startswith("pycomm: GPU kernels: none") and "no HIP GPU is visible" in without, without


def test_on_needs_no_gpu_and_both_on_is_refused(tmp_path: Path) -> None:
    line = decision(choose(tmp_path, {"nvidia-smi": (6, "")}, PYCOMM_CUDA="on", PYCOMM_HIP="off"))
    assert line == "pycomm: GPU kernels: cuda (PYCOMM_CUDA=on)", line
    both = choose(tmp_path, {}, PYCOMM_CUDA="on", PYCOMM_HIP="on")
    assert both.returncode != 0 and "one build targets one GPU vendor" in both.stderr, both.stderr
