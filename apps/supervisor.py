"""Automatic restart of parameter-server processes: a server rank that dies (a signal, a non-zero exit)
while its job goes on is started again with `--resume auto`, so that it resumes from its latest
checkpoint (algorithms/ps/server_state.py) and its workers, which reconnect by themselves, go on. At most
PYCOMM_PS_SERVER_RESTARTS restarts per server rank (pycomm/settings.py); each is logged with its cause. A
server that refused its checkpoint or its configuration (apps.failure's exit codes) is not restarted. A
server given up on ends the job: its workers, which would wait for it until their server timeout, are stopped
(SIGUSR1, as a preemption; SIGKILL after STOP_GRACE_SECONDS) and the job fails with the server's code.
Used by `--nproc N` (apps.launch.spawn_independent) and by `python -m apps.ps server`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from apps.apps_settings import RESTARTS_ENV
from apps.failure import EXIT_CHECKPOINT, EXIT_CONFIG
from pycomm import settings

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 10.0  # a worker blocked on its dead server may not reach its stop check: then SIGKILL


def resume_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with its --resume option (if any) replaced by `--resume auto`, and without --overwrite (the
    launcher acted on it once)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume":
            skip = True
        elif not a.startswith("--resume=") and a != "--overwrite":
            out.append(a)
    return [*out, "--resume", "auto"]


def how(code: int) -> str:
    """A process's end in words (Popen's returncode: negative for a signal)."""
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


class Supervisor:
    """Waits for processes (rank -> Popen), restarting the server ranks that die while `job_goes_on()`.
    Stop signals (SIGTERM, SIGUSR1, SIGINT) are forwarded to the live processes (SIGTERM as SIGUSR1: the
    apps' ranks save and stop on it) and end the restarting."""

    def __init__(
        self,
        start: Callable[[int, Sequence[str]], subprocess.Popen],
        argv: Sequence[str],
        ranks: Sequence[int],
        servers: Sequence[int],
        job_goes_on: Callable[[dict[int, subprocess.Popen]], bool],
        prefix: str = "apps.launch",
    ) -> None:
        self.start, self.argv, self.servers, self.job_goes_on = start, list(argv), set(servers), job_goes_on
        self.prefix = prefix
        self.limit: int = settings.get(RESTARTS_ENV)
        self.restarts = {r: 0 for r in self.servers}
        self.given_up: set[int] = set()
        self.stopping = False
        self.stop_deadline: float | None = None  # when the workers of a job given up on get SIGKILL
        self.procs = {r: start(r, self.argv) for r in ranks}

    def wait(self) -> dict[int, int]:
        """Every process's final exit code (a restarted server's: its last incarnation's)."""
        with self._forwarding_stop_signals():
            while True:
                self._restart_dead_servers()
                self._kill_workers_past_grace()
                if all(p.poll() is not None for p in self.procs.values()):
                    break
                time.sleep(POLL_SECONDS)
        return {r: p.returncode for r, p in self.procs.items()}

    def _restart_dead_servers(self) -> None:
        for r in sorted(self.servers - self.given_up):
            code = self.procs[r].poll()
            if code in (None, 0) or self.stopping or not self.job_goes_on(self.procs):
                continue
            if code in (EXIT_CHECKPOINT, EXIT_CONFIG):  # its checkpoint or config refused: a restart reads the same
                self._give_up(
                    r,
                    f"server rank {r} {how(code)} (its checkpoint or its configuration was refused, see its "
                    "error); not restarted: --resume auto would read the same",
                )
                continue
            if self.restarts[r] >= self.limit:
                self._give_up(
                    r,
                    f"server rank {r} {how(code)}; not restarted: it was restarted {self.limit} times "
                    f"already ({RESTARTS_ENV}={self.limit})",
                )
                continue
            self.restarts[r] += 1
            self.log(
                f"server rank {r} {how(code)}; restarting it from its latest checkpoint (--resume auto), "
                f"restart {self.restarts[r]} of {self.limit} ({RESTARTS_ENV})"
            )
            self.procs[r] = self.start(r, resume_argv(self.argv))

    def _live_workers(self) -> list[int]:
        return [r for r, p in self.procs.items() if r not in self.servers and p.poll() is None]

    def _give_up(self, rank: int, why: str) -> None:
        """No server, no progress: stop the workers now rather than let them wait out their server timeout."""
        self.given_up.add(rank)
        self.log(why)
        if workers := self._live_workers():
            self.log(f"stopping worker ranks {workers}: they cannot go on without server rank {rank}")
            for r in workers:
                self.procs[r].send_signal(signal.SIGUSR1)
            self.stop_deadline = time.monotonic() + STOP_GRACE_SECONDS

    def _kill_workers_past_grace(self) -> None:
        if self.stop_deadline is None or time.monotonic() < self.stop_deadline:
            return
        for r in self._live_workers():
            self.log(f"worker rank {r} did not stop within {STOP_GRACE_SECONDS:g} s of SIGUSR1: killing it")
            self.procs[r].kill()
        self.stop_deadline = None

    def log(self, text: str) -> None:
        print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)

    @contextmanager
    def _forwarding_stop_signals(self) -> Iterator[None]:
        def forward(signum: int, frame: object) -> None:
            self.stopping = True
            for p in self.procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGUSR1 if signum == signal.SIGTERM else signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
