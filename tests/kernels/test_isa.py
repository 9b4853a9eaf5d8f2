"""The CPU kernels are built for the x86-64 baseline and for AVX2 (kernels/cpu/isa.h); both
variants must give bit-identical results. PYCOMM_CPU_ISA=generic forces the baseline."""

import os
import subprocess
import sys

import pytest
import torch

import pycomm
from tests.launch import ROOT


def run_variant(path, force_generic: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYCOMM_CPU_ISA", None)
    if force_generic:
        env["PYCOMM_CPU_ISA"] = "generic"
    subprocess.run(
        [sys.executable, "-m", "tests.kernels.isa_worker", str(path)], cwd=ROOT, env=env, check=True, timeout=300
    )
    return torch.load(path)


@pytest.mark.skipif(pycomm.build_info().get("cpu_isa") != "avx2", reason="this build/CPU runs only the baseline")
def test_avx2_and_baseline_agree_bit_for_bit(tmp_path):
    base = run_variant(tmp_path / "generic.pt", True)
    fast = run_variant(tmp_path / "avx2.pt", False)
    assert base.pop("isa") == "generic" and fast.pop("isa") == "avx2"
    assert base.keys() == fast.keys()
    for k in base:
        assert torch.equal(base[k], fast[k]), k
