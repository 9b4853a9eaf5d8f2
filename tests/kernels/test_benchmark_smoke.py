"""benchmarks/kernels.py runs end to end (--quick) and writes its JSON and PNG; no timing thresholds."""

import json
import os
import subprocess
import sys

from tests.launch import ROOT

KERNELS = {
    "pack f32->bf16 x0.5",
    "unpack bf16->f32 x0.5",
    "quantize int8",
    "quantize int8 stochastic",
    "dequantize int8",
    "dequantize-accumulate int8",
    "1-bit compress +residual",
    "1-bit decompress",
    "averaging apply (x += avg - snap)",
    "elastic update (x = (1-a)x + a c)",
}


def test_kernel_benchmark_quick(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYCOMM_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernels", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "kernels.json").read_text())
    assert (tmp_path / "kernels.png").stat().st_size > 0
    assert doc["benchmark"] == "kernels" and doc["threads"] == 1 and doc["device"] == "cpu"
    assert doc["memcpy_GBps"]["single_thread"] > 0 and doc["memcpy_GBps"]["all_threads"] > 0
    assert {r["kernel"] for r in doc["rows"]} == KERNELS
    for r in doc["rows"]:
        assert r["GB/s"] > 0 and r["torch GB/s"] > 0 and r["vs torch"] > 0 and r["of memcpy"] > 0
    assert "quantize int8" in proc.stdout and "of memcpy" in proc.stdout
