"""Faults, for real, in `python -m apps.train` runs of the fault-tolerant algorithms: a worker killed
with SIGKILL mid-run stops neither the server nor the other workers (asyncps, syncps, ssp), the log
names the lost rank and the survivors reach 95% on MNIST; a server killed with SIGKILL under `--nproc` is
restarted by the launcher from its checkpoint, and one restarted by hand with --resume auto continues
from it too, while the workers reconnect."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.apps.runs import ROOT, worker_env
from tests.launch import finish, independent

SMALL = [
    "-o",
    "model.name=mlp",
    "-o",
    "train.log_every=10",
    "-o",
    "train.eval_every_epochs=0.5",
    "-o",
    "logging.plot=false",
    "-o",
    "checkpoint.every_steps=10",
]


def train_args(out: Path, name: str, algorithm: str, options: dict, steps: int) -> list[str]:
    return [
        "-o",
        f"out_dir={out}",
        "-o",
        f"name={name}",
        "-o",
        f"algorithm.name={algorithm}",
        "-o",
        f"algorithm.options={json.dumps(options)}",
        "-o",
        f"train.max_steps={steps}",
        *SMALL,
    ]


def last_eval(run_dir: Path) -> dict:
    return json.loads((run_dir / "eval.jsonl").read_text().splitlines()[-1])


# the apps' MNIST CNN for 3 epochs, as tests/apps/test_ps_mnist.py (about 15 s on 2 cores); the asynchronous
# runs with momentum 0.5, as there, and a 4th epoch (3 gave 95.1-95.3%); where a worker is killed, the two
# survivors see 2/3 of the data: a 5th (4 gave 95.45-96.1%)
MNIST = [
    "-o",
    "train.epochs=3",
    "-o",
    "train.eval_every_epochs=1",
    "-o",
    "logging.plot=false",
    "-o",
    "checkpoint.every_steps=10",
]

ASYNC = ["-o", "optim.momentum=0.5", "-o", "train.epochs=4"]
SURVIVORS = ["-o", "optim.momentum=0.5", "-o", "train.epochs=5"]
PLAIN = {"staleness_correction": None}  # with momentum lowered by hand to 0.5: the rule these budgets were set for


def mnist_args(out: Path, algorithm: str, options: dict, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "apps.train",
        "-o",
        f"out_dir={out}",
        "-o",
        "name=run",
        "-o",
        f"algorithm.name={algorithm}",
        "-o",
        f"algorithm.options={json.dumps(options)}",
        *MNIST,
        *extra,
    ]


def assert_trained_to_the_end(text: str, run_dir: Path) -> None:
    """The run logged its last step and its final evaluation is >= 95% (the accuracy a run without faults reaches)."""
    done = re.search(r"done: (\d+) steps", text)
    assert done, text
    ev = last_eval(run_dir)
    assert ev["step"] == int(done.group(1)) and ev["accuracy"] >= 0.95, ev


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "algorithm,nproc,options,extra,lost_line",
    [
        ("asyncps", 4, {"worker_timeout": 4, "pull_every": 2, **PLAIN}, SURVIVORS, "worker 2 lost: no message for"),
        ("syncps", 4, {"worker_timeout": 4, "polyak_alpha": 0.5, "pull_every": 4}, [], "worker 2 lost: no message for"),
        ("ssp", 3, {"worker_timeout": 4, "staleness_bound": 2, **PLAIN}, SURVIVORS, "rank 2 lost: no message for"),
    ],
)
def test_a_worker_killed_mid_run_stops_nobody(tmp_path, algorithm, nproc, options, extra, lost_line):
    argv = [*mnist_args(tmp_path, algorithm, options, extra), "--nproc", str(nproc)]
    proc = subprocess.run(
        argv,
        cwd=ROOT,
        env=worker_env({"PYCOMM_APPS_FAIL_AT": "2:20:kill"}),
        capture_output=True,
        text=True,
        timeout=500,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "rank 2 was killed by signal 9; the other ranks went on without it" in text, text
    assert lost_line in text, text
    assert_trained_to_the_end(text, tmp_path / "run")  # the survivors trained on, to >= 95%
    if algorithm != "ssp":
        assert "finished: 1, 3; lost: 2 (no message for" in text, text


def child_with_rank(parent: int, rank: int) -> int | None:
    """The pid of `parent`'s child process started as independent rank `rank` (PYCOMM_PS_RANK), if any yet."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return None
    for pid in map(int, children):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PYCOMM_PS_RANK={rank}".encode() in environ:
            return pid
    return None


@pytest.mark.timeout(600)
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the server process through /proc (Linux)")
@pytest.mark.parametrize("servers,killed", [(1, 0), (2, 1)])  # the only server; a shard server
def test_a_killed_server_is_restarted_by_the_launcher_and_training_goes_on(tmp_path, servers, killed):
    options = {"worker_timeout": 4, "servers": servers, **PLAIN}
    argv = [*mnist_args(tmp_path, "asyncps", options, ASYNC), "--nproc", str(servers + 3)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        saved = tmp_path / "run" / "checkpoints" / f"ps-server-{killed}.pt"
        deadline = time.monotonic() + 300
        while not saved.exists() or torch.load(saved, weights_only=False)["version"] < 60:
            assert time.monotonic() < deadline and proc.poll() is None, "the server never checkpointed"
            time.sleep(0.1)
        server = child_with_rank(proc.pid, killed)
        assert server is not None, "no server process among the launcher's children"
        os.kill(server, signal.SIGKILL)  # mid-run: the workers are still training
        version = torch.load(saved, weights_only=False)["version"]
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out + err
    assert proc.returncode == 0, text
    assert (
        f"apps.launch: server rank {killed} was killed by signal 9; restarting it from its latest checkpoint "
        "(--resume auto), restart 1 of 3 (PYCOMM_PS_SERVER_RESTARTS)"
    ) in text, text
    resumed = re.search(rf"resumed from \S*ps-server-{killed}\.pt at version (\d+)", text)
    assert resumed and int(resumed.group(1)) >= version >= 60, text
    workers = ", ".join(str(w) for w in range(servers, servers + 3))
    assert "server 0: " in text and f"workers finished: {workers}; lost: none" in text, text
    assert_trained_to_the_end(text, tmp_path / "run")


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
    procs[0].kill()  # SIGKILL, mid-run
    procs[0].wait()
    version = torch.load(saved, weights_only=False)["version"]
    restarted = independent(4, "apps.train", *args, "--resume", "auto", ranks=[0], base_port=base)
    ((code, out, err),) = finish(restarted, timeout=400)
    finish(procs[1:], timeout=100)
    resumed = [ln for ln in (out + err).splitlines() if "resumed from" in ln and "ps-server-0.pt" in ln]
    assert resumed, out + err
    at = int(resumed[0].split("at version ")[1].split()[0])
    assert at >= version >= 30
    final = torch.load(saved, weights_only=False)
    assert final["version"] > at  # it trained on after the restart
    assert sorted(final["clocks"]) == [1, 2, 3]  # every worker came back to it
    assert "workers finished: 1, 2, 3; lost: none" in out + err, out + err
