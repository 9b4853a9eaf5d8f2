"""Launching: which launcher started us (pycomm.launch_env reads Open MPI, MPICH/PMI, torchrun and
srun), MASTER_ADDR/MASTER_PORT for TCP rendezvous, and `--nproc N` on one machine: re-run ourselves
under `mpirun -n N` and supervise it."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Mapping, Sequence

from apps import failure
from apps.apps_settings import SPAWNED  # set on the ranks we spawn, so they never spawn again
from apps.mpirun_stderr import MpirunStderr
from pycomm import hugepages, settings, startup_profile
from pycomm.launch_env import LaunchEnv, detect, first_host  # noqa: F401  (re-exported for apps)


def export_rendezvous(launch: LaunchEnv) -> None:
    """MASTER_ADDR/MASTER_PORT as pycomm.launch_env found or defaulted them (SLURM: first node, port from
    the job id), exported for child processes and libraries that read the variables themselves."""
    if launch.master_addr and "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = launch.master_addr
    if launch.master_port is not None and "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(launch.master_port)


def should_spawn(nproc: int, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    from algorithms.ps.layout import RANK_ENV  # a process of an independent launch is one rank already

    return (
        nproc > 1
        and detect(env).launcher == "single"
        and not settings.get(SPAWNED, env)
        and settings.get(RANK_ENV, env) is None
    )


def mpirun_command(nproc: int, argv: Sequence[str], module: str = "apps.train", term_grace_s: int = 1) -> list[str]:
    """mpirun starting `python -m module argv` on nproc ranks. When a rank dies, Open MPI sends the others
    SIGTERM and, `term_grace_s` seconds later (its default: 1), SIGKILL."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError(
            f"--nproc {nproc} needs mpirun (apt-get install openmpi-bin), or start the ranks "
            "yourself with srun / torchrun; --nproc 1 runs one process"
        )
    cmd = [mpirun, "-n", str(nproc), "--oversubscribe", "--bind-to", "none"]
    if term_grace_s != 1:
        cmd += ["--mca", "odls_base_sigkill_timeout", str(term_grace_s)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")  # containers often run as root; Open MPI refuses without it
    return cmd + [sys.executable, "-m", module, *argv]


def rank_env(nproc: int) -> dict[str, str]:
    """The environment of the nproc ranks a launcher starts: ours, marked spawned, a share of the cores
    for OpenMP each, this checkout importable, and torch's huge-page allocator (pycomm.hugepages)."""
    env = hugepages.rank_env(dict(os.environ))
    env[SPAWNED] = "1"
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    return env


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def spawn(
    nproc: int,
    argv: Sequence[str],
    module: str = "apps.train",
    stop_signals: Sequence[int] = STOP_SIGNALS,
    term_grace_s: int = 1,
    log: Path | None = None,
) -> int:
    """Run `python -m module argv` on nproc local ranks under mpirun and return its exit code. When a
    rank fails, the last lines say which and why (apps.failure), not Open MPI's banner. `stop_signals`
    reach the ranks as SIGUSR1 (apps.serve adds SIGINT: a server stops cleanly on Ctrl-C too);
    `term_grace_s`: mpirun_command's. `log`: a file that mpirun's whole stderr is appended to (the ranks'
    lines and all of Open MPI's messages, those the terminal is spared included)."""
    cmd = mpirun_command(nproc, argv, module, term_grace_s)
    env = rank_env(nproc)
    env.setdefault("PYCOMM_APPS_TTY", "1" if sys.stdout.isatty() else "0")  # see apps.metrics.Progress
    with tempfile.TemporaryDirectory(prefix="pycomm-apps-failures-") as failures, _log_file(log, cmd) as log_file:
        env[failure.FAILURE_DIR_ENV] = failures
        proc = subprocess.Popen(
            cmd, env=env, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=_own_process_group_ended_with_us
        )
        startup_profile.mark("mpirun_started")
        assert proc.stderr is not None
        stderr = MpirunStderr(proc.stderr, sys.stderr, log_file)
        with forwarding_stop_signals(proc, stop_signals):
            try:
                code, interrupted = proc.wait(), False
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached only us: mpirun stops the ranks on it
                proc.send_signal(signal.SIGINT)
                code, interrupted = proc.wait(), True
            stderr.join()
            if log_file is not None:
                log_file.write(f"==== mpirun exited with code {code} ====\n")
            _report(code, failure.read(Path(failures)), stderr, interrupted, log)
    return code


@contextmanager
def _log_file(path: Path | None, cmd: Sequence[str]) -> Iterator[IO[str] | None]:
    """`path` opened for appending (a resumed run's launches follow its earlier ones), headed by the
    command and the time; None without a path."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)} ====\n")
        yield f


def _own_process_group_ended_with_us() -> None:
    """Run in mpirun before it starts. A process group of its own: a signal to our whole group (`timeout`,
    `kill -- -PGID`, a batch system signalling every task, a terminal's Ctrl-C) reaches only this launcher,
    which forwards it (forwarding_stop_signals, spawn). Open MPI answers a SIGTERM of its own by killing the
    ranks a second later, mid-save, and the run ended "mpirun exited with code 1". PR_SET_PDEATHSIG: mpirun
    still gets SIGTERM (and stops the ranks) when this launcher dies, as when it shared our group."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG


@contextmanager
def forwarding_stop_signals(proc: subprocess.Popen, signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """SIGTERM/SIGUSR1 to us reach the ranks once, as SIGUSR1 (Open MPI forwards SIGUSR1 but answers
    SIGTERM by killing the job), so they save and exit 0. Repeats are ignored (a second forward
    used to kill ranks that had already saved), until exit once a stop was forwarded; Ctrl-C or
    SIGKILL still stop the job."""
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        if len(received) == 1:
            proc.send_signal(signal.SIGUSR1)
        elif len(received) == 2:  # os.write: a print here could re-enter one in progress
            os.write(
                2,
                f"apps.launch: signal {signum} ignored: the ranks were already asked to save and stop; "
                f"Ctrl-C (SIGINT) or SIGKILL stop the job\n".encode(),
            )

    previous = {s: signal.signal(s, forward) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if received else handler)


def _report(
    code: int, failures: list[failure.Failure], stderr: MpirunStderr, interrupted: bool, log: Path | None = None
) -> None:
    """The job's verdict on stderr: the ranks' records, else what Open MPI said about the failure."""
    if code == 0:
        lines = stderr.held  # Open MPI's warnings about a run that went well still matter
    elif failures:
        lines = failure.verdict(failures)
    elif interrupted:
        lines = [f"interrupted: mpirun stopped the ranks (exit code {code})"]
    elif line := stderr.summary():
        lines = [line]
    else:
        lines = stderr.held or [f"mpirun exited with code {code}" + (f"; all it printed: {log}" if log else "")]
    for line in lines:
        print(line.rstrip("\n"), file=sys.stderr, flush=True)


def spawn_independent(nproc: int, argv: Sequence[str], servers: int = 0) -> int:
    """Run `argv` as nproc independent local processes, for algorithms whose ranks must survive a peer's
    death (traits: independent_processes; they talk over ZeroMQ, see algorithms/ps): no mpirun, whose job
    model kills every rank when one dies. Each learns its rank, the world size and rank 0's address from
    PYCOMM_PS_*(algorithms.ps.layout). A rank that dies is reported and the others go on; a server rank
    (ranks 0 .. servers-1) that dies while a worker still runs is restarted from its checkpoint
    (apps.supervisor). The exit code is rank 0's (a server: it writes the metrics and the model); without a
    server, where a surviving peer takes the writing over from a dead rank 0, 0 when any rank finished its
    run (exited 0), else rank 0's."""
    from algorithms.ps import auth, layout
    from apps.supervisor import Supervisor, how

    base = layout.free_base_port(nproc)
    env = rank_env(nproc)
    secret = auth.new_secret()  # this launch's: in the ranks' environment, never on their command lines

    def start(rank: int, args: Sequence[str]) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "apps.train", *args],
            env={**env, **layout.env_for(rank, nproc, f"127.0.0.1:{base}", secret)},
        )

    def workers_running(procs: dict[int, subprocess.Popen]) -> bool:
        return any(p.poll() is None for r, p in procs.items() if r >= servers)

    codes = Supervisor(start, argv, range(nproc), range(servers), workers_running).wait()
    for r, code in sorted(codes.items()):
        if code != 0:
            print(
                f"apps.launch: rank {r} {how(code)}" + ("; the other ranks went on without it" if r >= servers else ""),
                file=sys.stderr,
                flush=True,
            )
    if not servers and any(code == 0 for code in codes.values()):
        return 0
    return codes[0]
