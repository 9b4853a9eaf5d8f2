"""Helpers for end-to-end tests of `python -m apps.train`: small, fast runs and their results."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from apps.apps_settings import FAIL_AT_ENV
from tests.launch import ROOT, sigint_as_in_a_terminal, worker_env

# A small run: MLP on the embedded MNIST, segments of 1,000 samples, a checkpoint every 10 steps.
SMALL = [
    "-o",
    "model.name=mlp",
    "-o",
    "train.max_steps=60",
    "-o",
    "data.segment_size=1000",
    "-o",
    "checkpoint.every_steps=10",
    "-o",
    "train.log_every=5",
    "-o",
    "train.eval_every_epochs=0.1",
    "-o",
    "logging.plot=false",
]


def args(out: Path, name: str, algorithm: str, nproc: int, *extra: str) -> list[str]:
    algo = ["-o", f"algorithm.name={algorithm}"] + (["-o", "algorithm.options={}"] if algorithm != "plsgd" else [])
    return [
        "-m",
        "apps.train",
        "--nproc",
        str(nproc),
        "-o",
        f"out_dir={out}",
        "-o",
        f"name={name}",
        *algo,
        *SMALL,
        *extra,
    ]


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def held_at(after_line: str) -> dict[str, str]:
    """The environment that holds rank 0 at the step of a progress line "step N/" until a signal reaches it
    (PYCOMM_APPS_FAIL_AT=0:N:hold), so a signal sent on seeing the line lands before the run ends: a 60-step
    run can end in half a second on an idle machine."""
    step = re.fullmatch(r"step (\d+)/", after_line)
    return {FAIL_AT_ENV: f"0:{step[1]}:hold"} if step else {}


def _start_held(argv: list[str], after_line: str, via: Sequence[str] = (), **popen: Any) -> subprocess.Popen:
    """`python -u argv` (run by the command `via`, if any) with stdout and stderr merged into one text
    pipe, rank 0 held at after_line."""
    return subprocess.Popen(
        [*via, sys.executable, "-u", *argv],
        cwd=ROOT,
        env=worker_env(held_at(after_line)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def preempt(
    argv: list[str],
    after_line: str = "step 10/",
    sig: int = signal.SIGTERM,
    timeout: float = 300,
    whole_group: bool = False,
    via: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """Start the run, send `sig` once a progress line containing after_line appears (rank 0 holds there
    until it arrives: held_at); wait for exit. whole_group: to the run's whole process group, as `timeout`,
    `kill -- -PGID` and batch systems do, not to the launcher alone. via: a command that runs the run
    (`timeout ...`): `sig` goes to it."""
    proc = _start_held(argv, after_line, via, start_new_session=whole_group)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if after_line in line:
            if whole_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            break
    out, _ = proc.communicate(timeout=timeout)
    text = "".join(lines) + out
    assert proc.returncode == 0, f"preempted run exited {proc.returncode}\n{text}"
    return subprocess.CompletedProcess(argv, proc.returncode, text, "")


@dataclass
class Watched:
    returncode: int
    output: str  # stdout and stderr, merged as they came
    after_mark: float  # seconds from the first line containing the mark to the exit


def watch(argv: list[str], mark: str, env: dict[str, str] | None = None, timeout: float = 100) -> Watched:
    """Run to its end (expected to fail), timing from the first output line containing `mark`.
    The timeout (default 100 s) stays below worker_env's PYCOMM_TIMEOUT=120: a job that only ends when
    a rank's collective times out fails the test instead of passing late."""
    proc = subprocess.Popen(
        [sys.executable, "-u", *argv],
        cwd=ROOT,
        env=worker_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))  # mpirun and the ranks too
    timer.start()
    lines, marked = [], None
    try:
        for line in proc.stdout:
            lines.append(line)
            if marked is None and mark in line:
                marked = time.monotonic()
        proc.wait()
    finally:
        timer.cancel()
    text = "".join(lines)
    assert marked is not None, f"no line with {mark!r} (exit {proc.returncode})\n{text}"
    assert proc.returncode != -signal.SIGKILL, f"still running after {timeout} s\n{text}"
    return Watched(proc.returncode, text, time.monotonic() - marked)


def preempt_repeatedly(
    argv: list[str], after_line: str = "step 10/", timeout: float = 300
) -> subprocess.CompletedProcess:
    """SIGTERM once a progress line containing after_line appears, then again every 0.1 s from the
    "preempted" message (the save is done) until the process exits, as an impatient scheduler would (rank 0
    holds at after_line until the first arrives: held_at)."""
    proc = _start_held(argv, after_line)
    lines, saved = [], threading.Event()

    def repeat() -> None:
        saved.wait()
        while proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.1)

    repeater = threading.Thread(target=repeat, daemon=True)
    repeater.start()
    sent = False
    for line in proc.stdout:
        lines.append(line)
        if not sent and after_line in line:
            proc.send_signal(signal.SIGTERM)
            sent = True
        if "preempted" in line:
            saved.set()
    proc.wait(timeout=timeout)
    saved.set()
    repeater.join()
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(lines), "")


def interrupt(argv: list[str], after_line: str = "step 10/", timeout: float = 300) -> subprocess.CompletedProcess:
    """Ctrl-C as a terminal sends it (SIGINT to the process group) once after_line appears (rank 0 holds
    there until it arrives: held_at)."""
    proc = _start_held(argv, after_line, start_new_session=True, preexec_fn=sigint_as_in_a_terminal)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if after_line in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    out, _ = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(lines) + out, "")


def final_params(run_dir: Path, rank: int = 0) -> dict[str, torch.Tensor]:
    ckpts = sorted(p for p in (run_dir / "checkpoints").glob("ckpt.step*") if not p.name.endswith(".preempt"))
    name = "model_state_dict.pt" if rank == 0 else f"model_state_dict.rank{rank}.pt"
    return torch.load(ckpts[-1] / name, weights_only=True)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs: max |diff| {float((a[k] - b[k]).abs().max())}"
