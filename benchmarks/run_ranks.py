"""Starting real ranks from tests and benchmarks: `mpirun` (Open MPI), `torchrun`, plain and independent
processes; tests/slurm.py adds `srun`. (Here rather than in tests/: benchmarks use them too, and nothing
imports tests.)

A worker is a Python module run on every rank; it asserts and exits non-zero on failure, and the
launcher turns that into a test failure carrying every rank's output."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
# the secret of the independent processes started from this process (a run's ranks must share one; a rank
# built in this process for a test gets it with PYCOMM_PS_SECRET)
SECRET = secrets.token_hex(32)


def have_mpirun() -> bool:
    return shutil.which("mpirun") is not None


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # ranks share 2 cores: no OpenMP oversubscription
    env.setdefault("PYCOMM_TIMEOUT", "120")  # a hang becomes an error, not a stuck CI run
    env.update(extra or {})
    return env


def mpirun_argv(n: int, mca: Sequence[str] = (), bind_to_none: bool = True) -> list[str]:
    """mpirun's argv for n ranks; `bind_to_none=False`: Open MPI's default binding, as a user's plain
    `mpirun -n N` gets it (a rank per core while there are cores enough)."""
    argv = ["mpirun", "-n", str(n), "--oversubscribe", *(["--bind-to", "none"] if bind_to_none else [])]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    for kv in mca:
        key, value = kv.split("=", 1)
        argv += ["--mca", key, value]
    return argv


def check(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        raise AssertionError(
            f"{what} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
    return proc


def mpirun(
    n: int,
    module: str,
    *args: str,
    timeout: float = 300,
    env: Mapping[str, str] | None = None,
    mca: Sequence[str] = (),
    expect_ok: bool = True,
) -> subprocess.CompletedProcess:
    """Run `python -m module args...` on n ranks; fail with all output unless it exits 0."""
    argv = [*mpirun_argv(n, mca), sys.executable, "-m", module, *args]
    proc = subprocess.run(argv, cwd=ROOT, env=worker_env(env), capture_output=True, text=True, timeout=timeout)
    return check(proc, " ".join(argv)) if expect_ok else proc


def torchrun(
    n: int, module: str, *args: str, timeout: float = 300, env: Mapping[str, str] | None = None, expect_ok: bool = True
) -> subprocess.CompletedProcess:
    """Run `python -m module args...` as n local ranks of `torchrun --standalone --nproc-per-node n` (its agent store
    on a free port); fail with all output unless it exits 0."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(n),
        "--standalone",
        "-m",
        module,
        *args,
    ]
    proc = subprocess.run(argv, cwd=ROOT, env=worker_env(env), capture_output=True, text=True, timeout=timeout)
    return check(proc, " ".join(argv)) if expect_ok else proc


def python(
    module: str, *args: str, timeout: float = 300, env: Mapping[str, str] | None = None, expect_ok: bool = True
) -> subprocess.CompletedProcess:
    """Run `python -m module args...` as one plain process (no launcher)."""
    argv = [sys.executable, "-m", module, *args]
    proc = subprocess.run(argv, cwd=ROOT, env=worker_env(env), capture_output=True, text=True, timeout=timeout)
    return check(proc, " ".join(argv)) if expect_ok else proc


def independent(
    n: int,
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    ranks: Sequence[int] | None = None,
    base_port: int | None = None,
) -> list[subprocess.Popen]:
    """Start `python -m module args...` as n independent processes (no MPI: the fault-tolerant algorithms'
    launch), rank r with PYCOMM_PS_RANK=r listening on 127.0.0.1:base_port + r; only `ranks` when given
    (e.g. to restart one); every one with the run's secret SECRET in its environment. Output goes to pipes:
    read it with `finish`."""
    from algorithms.ps import layout

    base = layout.free_base_port(n) if base_port is None else base_port
    procs = []
    for r in range(n) if ranks is None else ranks:
        extra = {**layout.env_for(r, n, f"127.0.0.1:{base}", SECRET), **(env or {})}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                env=worker_env(extra),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        procs[-1].base_port = base  # type: ignore[attr-defined]
    return procs


def finish(
    procs: Sequence[subprocess.Popen], timeout: float = 300, expect_ok: bool = True
) -> list[tuple[int, str, str]]:
    """Wait for the processes; (returncode, stdout, stderr) of each. With expect_ok, a non-zero exit fails
    with everyone's output."""
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if expect_ok and any(code != 0 for code, _, _ in out):
        text = "\n".join(f"--- process {i} exit {c} ---\n{o}\n{e}" for i, (c, o, e) in enumerate(out))
        raise AssertionError(f"independent processes failed:\n{text}")
    return out


def free_port() -> int:
    """A TCP port free on this host now, for a rendezvous the ranks started next will bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sigint_as_in_a_terminal() -> None:
    """A Popen preexec_fn: SIGINT's default action, as a terminal's foreground job has it. A process started in
    the background (`nohup`, `&` in a script) ignores SIGINT, its children inherit that, and Python then installs
    no KeyboardInterrupt: a Ctrl-C a test sends would be slept through."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
