"""`python -m apps.train --nproc 2` with PYCOMM_PROFILE_STARTUP: the launcher and both ranks write their
start-up phases, in their real order, up to the first training step (presence and form only, no timings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pycomm.startup_profile import ENV, PROCESS_START
from pycomm.startup_report import read
from tests.launch import ROOT, python, worker_env

LAUNCHER = [
    PROCESS_START,
    "main_start",
    "torch_imported",
    "pycomm_imported",
    "apps_imported",
    "config_resolved",
    "mpirun_started",
]
RANK = [
    PROCESS_START,
    "main_start",
    "torch_imported",
    "pycomm_imported",
    "apps_imported",
    "config_resolved",
    "mpi_init",
    "init",
    "data_loaded",
    "model_built",
    "algorithm_ready",
    "run_ready",
    "first_step",
]


@pytest.mark.mpi
def test_apps_train_startup_phases(tmp_path: Path) -> None:
    profile = tmp_path / "startup.jsonl"
    python(
        "apps.train",
        "--nproc",
        "2",
        "-o",
        "train.max_steps=1",
        "-o",
        "logging.plot=false",
        "-o",
        f"out_dir={tmp_path / 'runs'}",
        env={ENV: str(profile)},
        timeout=600,
    )
    processes = {p.label: p for p in read(profile)}
    assert sorted(processes) == ["main", "rank 0", "rank 1"]
    assert [ph.name for ph in processes["main"].phases] == LAUNCHER
    for label in ("rank 0", "rank 1"):
        p = processes[label]
        assert (p.launcher, p.size) == ("openmpi", 2)
        assert [ph.name for ph in p.phases] == RANK, label  # read() orders by time: this is the real order
        assert all(ph.seconds >= 0 for ph in p.phases)


PROBE_CHECK = """
import sys, torch
from apps import optim
from apps.config import loading
from apps.config.schema import OptimConfig
loaded = loading.resolve([], ["optim.name=adamw"])
assert "torch._dynamo" not in sys.modules, "the config checks imported torch._dynamo"
fn = torch.optim.Optimizer.add_param_group.__wrapped__
assert not hasattr(fn, "__dynamo_disable"), "the probe left its shortcut behind"
try:
    optim.probe_optimizer(OptimConfig(nesterov=True, momentum=0.0))
except ValueError as e:
    assert "Nesterov" in str(e), e   # torch's own argument checks still run on the probe
else:
    raise AssertionError("nesterov without momentum was accepted")
real = optim.build_optimizer(loaded.config.optim, torch.nn.Linear(2, 2))
assert "torch._dynamo" in sys.modules and type(real).__name__ == "AdamW"   # a real optimizer: torch's own path
"""


def test_config_checks_leave_torch_dynamo_unimported() -> None:
    """The --nproc launcher checks the config with a throwaway optimizer without importing torch._dynamo
    (1.5-2 s before any rank could start); torch's checks of the optimizer's arguments still run, and
    optimizers built afterwards take torch's own path."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE_CHECK], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
