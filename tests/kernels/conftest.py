"""Kernel tests run on every device this build and this machine have: cpu always, cuda (or ROCm)
when torch sees a GPU and pycomm was built with GPU kernels; otherwise the cuda cases skip. The cuda
cases are marked gpu (scripts/gpu_check.sh runs `-m gpu tests/kernels` on a GPU machine)."""

import pytest
import torch

import pycomm


def gpu_ready() -> bool:
    info = pycomm.build_info()
    return torch.cuda.is_available() and (info["cuda"] or info["hip"])


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> str:
    if request.param == "cuda" and not gpu_ready():
        pytest.skip("no GPU here, or pycomm built without CUDA/HIP")
    return request.param


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()
