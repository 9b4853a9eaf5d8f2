"""MPI with CUDA tensors on 2 real ranks sharing one GPU (pinned-memory staging unless the MPI is CUDA-aware):
every op of the collectives suite on CUDA tensors, and allreduce_quantized on the GPU codec kernels with the
CPU's bytes. On a GPU only (marked gpu): scripts/gpu_check.sh runs them there."""

from __future__ import annotations

import re

import pytest
import torch

import pycomm
from tests.launch import mpirun

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.mpi,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and pycomm.build_info()["cuda"] and pycomm.build_info()["mpi"]),
        reason="needs a GPU and a build of pycomm with CUDA and MPI",
    ),
]


def test_collectives_suite_on_cuda_tensors():
    proc = mpirun(2, "tests.comm.workers.collectives", "--device", "cuda", timeout=400)
    passed = re.findall(r"rank (\d+)/(\d+) \(mpi\): (\d+) checks passed", proc.stdout)
    assert sorted(int(r) for r, _, _ in passed) == [0, 1], proc.stdout
    assert all(int(n) > 300 for _, _, n in passed), proc.stdout
    assert proc.stdout.count("op tensors on cuda") == 2, proc.stdout


def test_quantized_allreduce_on_the_gpu_codec_kernels():
    proc = mpirun(2, "tests.comm.workers.quantized_gpu", timeout=400)
    done = re.findall(r"rank (\d+): quantized gpu ok \((\d+) checks\)", proc.stdout)
    assert sorted(int(r) for r, _ in done) == [0, 1] and all(int(n) > 30 for _, n in done), proc.stdout
    print("\n".join(line for line in proc.stdout.splitlines() if "GPU-RESULT:" in line))
