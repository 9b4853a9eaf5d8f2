"""Faults, for real, in `python -m apps.train` runs of the fault-tolerant algorithms: a worker killed
with SIGKILL mid-run stops neither the server nor the other workers (asyncps, syncps, ssp), and the log
names the lost rank; a server killed with SIGKILL and restarted with --resume auto continues from its
checkpoint while the workers reconnect."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.apps.runs import ROOT, worker_env
from tests.launch import finish, independent

SMALL = ["-o", "model.name=mlp", "-o", "train.log_every=10", "-o", "train.eval_every_epochs=0.5",
         "-o", "logging.plot=false", "-o", "checkpoint.every_steps=10"]


def train_args(out: Path, name: str, algorithm: str, options: dict, steps: int) -> list[str]:
    return ["-o", f"out_dir={out}", "-o", f"name={name}", "-o", f"algorithm.name={algorithm}",
            "-o", f"algorithm.options={json.dumps(options)}", "-o", f"train.max_steps={steps}", *SMALL]


def last_eval(run_dir: Path) -> dict:
    return json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("algorithm,nproc,options,lost_line", [
    ("asyncps", 4, {"worker_timeout": 4, "pull_every": 2}, "worker 2 lost: no message for"),
    ("syncps", 4, {"worker_timeout": 4, "polyak_alpha": 0.5, "pull_every": 4}, "worker 2 lost: no message for"),
    ("ssp", 3, {"worker_timeout": 4, "staleness_bound": 2}, "rank 2 lost: no message for"),
])
def test_a_worker_killed_mid_run_stops_nobody(tmp_path, algorithm, nproc, options, lost_line):
    argv = [sys.executable, "-m", "apps.train", "--nproc", str(nproc),
            *train_args(tmp_path, "run", algorithm, options, 120)]
    proc = subprocess.run(argv, cwd=ROOT, env=worker_env({"PYCOMM_APPS_FAIL_AT": "2:20:kill"}),
                          capture_output=True, text=True, timeout=500)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "rank 2 was killed by signal 9; the other ranks went on without it" in text, text
    assert lost_line in text, text
    assert "done: 120 steps" in text, text
    ev = last_eval(tmp_path / "run")
    assert ev["step"] == 120 and ev["accuracy"] > 0.5, ev   # the survivors trained on (MLP, 120 steps)
    if algorithm != "ssp":
        assert "finished: 1, 3; lost: 2 (no message for" in text, text


@pytest.mark.timeout(600)
@pytest.mark.parametrize("algorithm", ["asyncps", "syncps"])
def test_a_killed_server_restarts_from_its_checkpoint_and_workers_reconnect(tmp_path, algorithm):
    args = train_args(tmp_path, "run", algorithm, {"worker_timeout": 2}, 400)
    procs = independent(4, "apps.train", *args)
    base = procs[0].base_port
    saved = tmp_path / "run" / "checkpoints" / "ps-server-0.pt"
    deadline = time.monotonic() + 300
    while not saved.exists() or torch.load(saved, weights_only=False)["version"] < 30:
        assert time.monotonic() < deadline and procs[0].poll() is None, "the server never checkpointed"
        time.sleep(0.2)
    procs[0].kill()   # SIGKILL, mid-run
    procs[0].wait()
    version = torch.load(saved, weights_only=False)["version"]
    restarted = independent(4, "apps.train", *args, "--resume", "auto", ranks=[0], base_port=base)
    (code, out, err), = finish(restarted, timeout=400)
    finish(procs[1:], timeout=100)
    resumed = [ln for ln in (out + err).splitlines() if "resumed from" in ln and "ps-server-0.pt" in ln]
    assert resumed, out + err
    at = int(resumed[0].split("at version ")[1].split()[0])
    assert at >= version >= 30
    final = torch.load(saved, weights_only=False)
    assert final["version"] > at                                    # it trained on after the restart
    assert sorted(final["clocks"]) == [1, 2, 3]                     # every worker came back to it
    assert "workers finished: 1, 2, 3; lost: none" in out + err, out + err
