"""Helpers for end-to-end tests of `python -m apps.train`: small, fast runs and their results."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import torch

from tests.launch import ROOT, worker_env

# A small run: MLP on the embedded MNIST, segments of 1,000 samples, a checkpoint every 10 steps.
SMALL = ["-o", "model.name=mlp", "-o", "train.max_steps=60", "-o", "data.segment_size=1000",
         "-o", "checkpoint.every_steps=10", "-o", "train.log_every=5", "-o", "train.eval_every_epochs=0.1",
         "-o", "logging.plot=false"]


def args(out: Path, name: str, algorithm: str, nproc: int, *extra: str) -> list[str]:
    algo = ["-o", f"algorithm.name={algorithm}"] + (["-o", "algorithm.options={}"] if algorithm != "plsgd" else [])
    return ["-m", "apps.train", "--nproc", str(nproc), "-o", f"out_dir={out}", "-o", f"name={name}", *algo,
            *SMALL, *extra]


def run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def preempt(argv: list[str], after_line: str = "step 10/", sig: int = signal.SIGTERM, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    """Start the run, send `sig` once a progress line containing after_line appears; wait for exit."""
    proc = subprocess.Popen([sys.executable, "-u", *argv], cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if after_line in line:
            proc.send_signal(sig)
            break
    out, _ = proc.communicate(timeout=timeout)
    text = "".join(lines) + out
    assert proc.returncode == 0, f"preempted run exited {proc.returncode}\n{text}"
    return subprocess.CompletedProcess(argv, proc.returncode, text, "")


def final_params(run_dir: Path, rank: int = 0) -> dict[str, torch.Tensor]:
    ckpts = sorted(p for p in (run_dir / "checkpoints").glob("ckpt.step*") if not p.name.endswith(".preempt"))
    name = "model_state_dict.pt" if rank == 0 else f"model_state_dict.rank{rank}.pt"
    return torch.load(ckpts[-1] / name, weights_only=True)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs: max |diff| {float((a[k] - b[k]).abs().max())}"
