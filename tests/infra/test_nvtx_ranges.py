"""Every collective and kernel shows as an NVTX range in the "pycomm" domain with its bytes, seen through an
NVTX injection library of our own (tests/infra/nvtx_log.c: Nsight Systems may be missing where this runs):
on the CPU here (local backend, CPU kernels), and on a GPU (NCCL, CUDA kernels; marked gpu)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pytest
import torch

import pycomm
from tests.infra import nvtx_log
from tests.launch import ROOT, worker_env

# diagnostics/nvtx.cc: an op's range "allreduce #3 4000B count=1000 ...", its phases' "wire allreduce #3 4000B",
# a waiter's "wait allreduce #3 4000B"
PHASES = ("queued", "op_check", "wait_peers", "wire")
OP = re.compile(rf"^(?:(wait|{'|'.join(PHASES)}) )?(\w+) #\d+ (\d+)B")
KERNEL = re.compile(r"^(\w+) (\d+)B (cpu|gpu\d+)$")  # "pack 3200B gpu0"


@pytest.fixture(scope="module")
def injection(tmp_path_factory):
    if not pycomm.build_info()["nvtx"]:
        pytest.skip("this build of pycomm has no NVTX ranges (no nvtx3 headers when it was built)")
    try:
        return nvtx_log.build(tmp_path_factory.mktemp("nvtx"))
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_every_collective_and_kernel_shows_with_its_bytes(injection, tmp_path, device):
    if device == "cuda" and not (torch.cuda.is_available() and pycomm.build_info()["nccl"]):
        pytest.skip("needs a GPU and a build of pycomm with NCCL")
    log, manifest = tmp_path / "nvtx.log", tmp_path / "manifest.json"
    env = worker_env({"NVTX_INJECTION64_PATH": str(injection), "NVTX_LOG_FILE": str(log)})
    p = subprocess.run(
        [sys.executable, "-m", "tests.infra.workers.nvtx_ranges", device, str(manifest)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    want = json.loads(manifest.read_text())
    events = [e for e in nvtx_log.read(log) if e.pid == want["pid"] and e.domain == "pycomm"]
    opened = [e for e in events if e.kind in ("push", "start")]
    seen, phases = Counter(), Counter()
    for e in opened:
        if m := KERNEL.match(e.message):
            name, nbytes = m.group(1), m.group(2)
            assert m.group(3) == ("cpu" if device == "cpu" else "gpu0"), e
        else:
            m = OP.match(e.message)
            assert m, f"a pycomm range that names no op or kernel: {e}"
            prefix, name, nbytes = m.groups()
            if prefix in PHASES:
                phases[prefix] += 1
        assert int(nbytes) == e.payload, f"the message and the payload disagree on the bytes: {e}"
        seen[(name, e.payload)] += 1
    if device == "cpu":  # the host queue's phases (NCCL's are timed by the GPU and shown at the watchdog)
        assert phases["wire"], f"no op shows its phases (wire): {sorted(phases)}"
    missing = [r for r in want["ranges"] if not seen[(r["name"], r["bytes"])]]
    assert not missing, f"no range for {missing}; pycomm's ranges: {sorted(seen)}"
    # every range closed: pushes popped, starts ended
    kinds = Counter(e.kind for e in events)
    assert kinds["push"] == kinds["pop"] and kinds["start"] == kinds["end"], kinds
    assert {e.range_id for e in events if e.kind == "start"} == {e.range_id for e in events if e.kind == "end"}
    if device == "cuda":
        print(
            f"GPU-RESULT: NVTX: {len(opened)} pycomm ranges on {torch.cuda.get_device_name(0)}, every collective "
            f"(NCCL) and CUDA kernel of the worker with its bytes"
        )
