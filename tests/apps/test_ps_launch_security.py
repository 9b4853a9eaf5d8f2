"""How `python -m apps.train` starts the fault-tolerant algorithms, for real: under `--nproc` every rank has
the launch's secret in its environment and no process has it on its command line (which every user of the
machine can read); under a plain `mpirun -n 3` asyncps trains to the end (its workers' preemption check
is no collective the server rank would have to join)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.apps.runs import ROOT, worker_env
from tests.apps.test_ps_faults import child_with_rank
from tests.launch import mpirun

SMALL = [
    "-o",
    "model.name=mlp",
    "-o",
    "data.segment_size=1000",
    "-o",
    "train.log_every=1",
    "-o",
    "logging.plot=false",
    "-o",
    "algorithm.name=asyncps",
]


def environ(pid: int) -> dict[str, str]:
    pairs = (entry.split(b"=", 1) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in entry)
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the ranks' command lines in /proc (Linux)")
def test_the_secret_is_in_the_ranks_environment_never_on_a_command_line(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "apps.train",
        "--nproc",
        "3",
        "-o",
        f"out_dir={tmp_path}",
        "-o",
        "name=run",
        "-o",
        "train.max_steps=400",
        *SMALL,
    ]
    launcher = subprocess.Popen(
        argv, cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        ranks: dict[int, int] = {}
        deadline = time.monotonic() + 200
        while len(ranks) < 3:
            assert time.monotonic() < deadline and launcher.poll() is None, "the ranks never started"
            ranks.update({r: pid for r in range(3) if (pid := child_with_rank(launcher.pid, r)) is not None})
            time.sleep(0.05)
        secrets = {environ(pid).get("PYCOMM_PS_SECRET") for pid in ranks.values()}
        assert len(secrets) == 1 and None not in secrets, secrets  # one secret, the same in every rank
        secret = secrets.pop()
        assert len(secret) >= 32
        for pid in [launcher.pid, *ranks.values()]:
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        assert secret not in environ(launcher.pid).get("PYCOMM_PS_SECRET", ""), "the launcher's own environment"
    finally:
        launcher.kill()
        launcher.wait()
        for pid in ranks.values():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_asyncps_under_a_plain_mpirun_trains_to_the_end(tmp_path):
    steps = 5
    proc = mpirun(
        3,
        "apps.train",
        "-o",
        f"out_dir={tmp_path}",
        "-o",
        "name=run",
        "-o",
        f"train.max_steps={steps}",
        *SMALL,
        timeout=240,
    )
    text = proc.stdout + proc.stderr
    assert f"done: {steps} steps" in text, text
    for worker in (1, 2):
        assert f"worker {worker} finished at step {steps}" in text, text
    assert "finished 1, 2, lost none" in text, text
