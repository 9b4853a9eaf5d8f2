"""Helpers for tests of `python -m apps.serve`: a real server started as a subprocess on a free port,
spoken to over HTTP, and stopped the way a user stops it (a signal to the launcher)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from tests.launch import ROOT, worker_env

START_TIMEOUT_S = 180     # import torch + fastapi on every rank of a loaded 2-core machine
STOP_TIMEOUT_S = 60

# A tiny char GPT trained for 3 steps: a real apps.train run directory with a checkpoint, in seconds.
TINY_GPT = ["-o", "model.options.n_layer=2", "-o", "model.options.n_embd=32", "-o", "model.options.n_head=2",
            "-o", "model.options.dropout=0.0", "-o", "data.options.block_size=64"]
# A random GPT of the same size, for servers that need no trained weights
RANDOM_GPT = [*TINY_GPT, "-o", "data.options.block_size=32"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_tiny_gpt(tmp: Path) -> Path:
    """apps.train's char GPT, tiny, 3 steps on a generated text; returns the run directory. It trains in
    `tmp` with a relative data.path and out_dir, as a user does: served from elsewhere, the run's
    data.path names no file, and the vocabulary must come from the checkpoint."""
    words = "to be or not that is the question whether tis nobler in mind".split()
    speakers = ["SYSTEM:", "USER:", "ASSISTANT:"]   # the chat template's headings (apps.serve.chat_template)
    text = "\n".join((f"\n{speakers[i // 4 % 3]}\n" if i % 4 == 0 else "") +
                     " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(8)) for i in range(300))
    (tmp / "text.txt").write_text(text)
    config = str(ROOT / "apps/configs/gpt_shakespeare_char.yaml")
    argv = [sys.executable, "-m", "apps.train", "--nproc", "1", "--config", config,
            "-o", "data.path=text.txt", *TINY_GPT, "-o", "data.batch_size=8", "-o", "data.eval_batch_size=8",
            "-o", "train.max_steps=3", "-o", "logging.plot=false", "-o", "out_dir=runs", "-o", "name=tiny"]
    proc = subprocess.run(argv, cwd=tmp, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp / "runs" / "tiny"


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log
        self.pids: list[int] = []

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 120), **kw)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (exited, not yet reaped by its parent) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _start(args: tuple[str, ...], log: Path) -> Server:
    """Start the server and wait for /health; on a free port taken meanwhile by another process, retry."""
    for attempt in range(3):
        port = free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-u", "-m", "apps.serve", *args, "--port", str(port)], cwd=ROOT,
                                    env=worker_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        server = Server(proc, f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None:
            try:
                health = httpx.get(server.url + "/health", timeout=5)
                if health.status_code == 200:
                    server.pids = health.json()["pids"]
                    return server
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError(f"no /health after {START_TIMEOUT_S} s\n{server.output()}")
            time.sleep(0.5)
        if "address already in use" not in server.output().lower():
            break
    raise AssertionError(f"apps.serve exited {proc.returncode}\n{server.output()}")


@contextmanager
def serving(*args: str, stop: int = signal.SIGTERM) -> Iterator[Server]:
    """Start `python -m apps.serve ARGS --port FREE`, wait for /health, yield; then send `stop` to the
    launcher and check it exits 0 with every rank gone (unless the job already ended: a test that
    killed a rank checks the exit itself)."""
    log = Path(tempfile.mkstemp(prefix="apps-serve-", suffix=".log")[1])
    server = None
    try:
        server = _start(args, log)
        proc = server.proc
        yield server
        if proc.poll() is None:
            proc.send_signal(stop)
            code = proc.wait(timeout=STOP_TIMEOUT_S)
            assert code == 0, f"apps.serve exited {code} after signal {stop}\n{server.output()}"
        deadline = time.monotonic() + 10
        while any(alive(p) for p in server.pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in server.pids if alive(p)], f"ranks left running: {server.pids}\n{server.output()}"
    finally:
        if server is not None and server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
        log.unlink(missing_ok=True)


def sse_events(response: httpx.Response) -> Iterator[tuple[float, dict]]:
    """(arrival time, event) of each `data:` line of a Server-Sent Events response."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield time.monotonic(), json.loads(line[5:])
