"""`python -m apps.serve` as a real server for tests and benchmarks: started as a subprocess on a free port,
ready once /health answers, and stopped the way a user stops it (a signal to the launcher), every rank
checked gone. (Here rather than in tests/: benchmarks/pipeline_inference.py uses it too, and nothing
imports tests.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from benchmarks.run_ranks import ROOT, free_port, sigint_as_in_a_terminal, worker_env

START_TIMEOUT_S = 180  # import torch + fastapi on every rank of a loaded 2-core machine
STOP_TIMEOUT_S = 60


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
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _start(args: tuple[str, ...], log: Path) -> Server:
    """Start the server and wait for /health; on a free port taken meanwhile by another process, retry."""
    for attempt in range(3):
        port = free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "apps.serve", *args, "--port", str(port)],
                cwd=ROOT,
                env=worker_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=sigint_as_in_a_terminal,  # it may be stopped with Ctrl-C's SIGINT
            )
        server = Server(proc, f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + START_TIMEOUT_S
        key = worker_env().get("PYCOMM_SERVE_API_KEY")  # /health names the processes only to a caller with it
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        while proc.poll() is None:
            try:
                health = httpx.get(server.url + "/health", timeout=5, headers=auth)
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
