"""Helpers for tests of `python -m apps.serve`: a tiny trained GPT to serve and the server's Server-Sent
Events; the server itself is started and stopped by benchmarks/serve_process.py (shared with the
benchmarks), re-exported here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

from benchmarks.serve_process import alive, serving  # noqa: F401 (re-exported for the tests)
from tests.launch import ROOT, worker_env

# A tiny char GPT trained for 3 steps: a real apps.train run directory with a checkpoint, in seconds.
TINY_GPT = [
    "-o",
    "model.options.n_layer=2",
    "-o",
    "model.options.n_embd=32",
    "-o",
    "model.options.n_head=2",
    "-o",
    "model.options.dropout=0.0",
    "-o",
    "data.options.block_size=64",
]
# A random GPT of the same size, for servers that need no trained weights
RANDOM_GPT = [*TINY_GPT, "-o", "data.options.block_size=32"]


def train_tiny_gpt(tmp: Path) -> Path:
    """apps.train's char GPT, tiny, 3 steps on a generated text; returns the run directory. It trains in
    `tmp` with a relative data.path and out_dir, as a user does: served from elsewhere, the run's
    data.path names no file, and the vocabulary must come from the checkpoint."""
    words = "to be or not that is the question whether tis nobler in mind".split()
    speakers = ["SYSTEM:", "USER:", "ASSISTANT:"]  # the chat template's headings (apps.serve.chat_template)
    text = "\n".join(
        (f"\n{speakers[i // 4 % 3]}\n" if i % 4 == 0 else "")
        + " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8))
        for i in range(300)
    )
    (tmp / "text.txt").write_text(text)
    config = str(ROOT / "apps/configs/gpt_shakespeare_char.yaml")
    argv = [
        sys.executable,
        "-m",
        "apps.train",
        "--nproc",
        "1",
        "--config",
        config,
        "-o",
        "data.path=text.txt",
        *TINY_GPT,
        "-o",
        "data.batch_size=8",
        "-o",
        "data.eval_batch_size=8",
        "-o",
        "train.max_steps=3",
        "-o",
        "logging.plot=false",
        "-o",
        "out_dir=runs",
        "-o",
        "name=tiny",
    ]
    proc = subprocess.run(argv, cwd=tmp, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "runs" / "tiny"


def sse_events(response: httpx.Response) -> Iterator[tuple[float, dict]]:
    """(arrival time, event) of each `data:` line of a Server-Sent Events response."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield time.monotonic(), json.loads(line[5:])
