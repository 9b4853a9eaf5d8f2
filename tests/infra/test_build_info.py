"""What the compiled core reports it was built with, against what this machine provides.
CI installs Open MPI and has /usr/local/cuda (NVTX3 headers), so there mpi and nvtx must be in."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import pycomm

NVTX_HEADERS = Path("/usr/local/cuda/include/nvtx3/nvToolsExt.h")
KEYS = {"cpu", "openmp", "cuda", "hip", "mpi", "nccl", "nvtx", "gpu_archs"}


def test_build_info_lists_every_component() -> None:
    info = pycomm.build_info()
    assert KEYS <= set(info), KEYS - set(info)
    assert info["cpu"] is True
    assert all(isinstance(info[k], bool) for k in KEYS - {"gpu_archs"})


def test_build_info_is_a_copy() -> None:
    pycomm.build_info()["cpu"] = False
    assert pycomm.build_info()["cpu"] is True


def test_mpi_compiled_in_where_mpicc_exists() -> None:
    if shutil.which("mpicc") is None:
        pytest.skip("no mpicc here (apt-get install libopenmpi-dev)")
    assert pycomm.build_info()["mpi"] is True


def test_nvtx_compiled_in_where_cuda_headers_exist() -> None:
    if not NVTX_HEADERS.exists():
        pytest.skip(f"no {NVTX_HEADERS} here")
    assert pycomm.build_info()["nvtx"] is True


def test_gpu_archs_reported_for_gpu_builds() -> None:
    info = pycomm.build_info()
    assert not (info["cuda"] and info["hip"]), "one build targets one GPU vendor"
    assert bool(info["gpu_archs"]) == (info["cuda"] or info["hip"]), info
