"""A fault-tolerant optimizer that becomes garbage together with its sockets releases its ZeroMQ context:
the garbage collector used to hang in ZeroMQ's term, waiting for a socket that pyzmq's weak set had already
let go of unclosed (the test suite hung in test_around_step)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.launch import ROOT, worker_env

pytest.importorskip("zmq")

SCRIPT = """
import gc, torch, pycomm, algorithms
pycomm.init()
model = torch.nn.Linear(4, 2)
opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="ssp", model=model)
model(torch.randn(3, 4)).sum().backward()
opt.step()
del opt
gc.collect()
print("released", flush=True)
"""


def test_an_ssp_optimizer_collected_with_its_sockets_releases_its_context() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("released"), proc
