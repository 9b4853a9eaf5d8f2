"""A single-node SLURM started by the test session, and `srun` for multi-rank tests under it.

`SlurmCluster` writes a slurm.conf into a temporary directory, starts munged (with a generated key),
slurmctld and slurmd in the foreground as children of the test process, and waits until `sinfo`
shows the node idle (about a second). Ports are picked free and every file lives in that directory,
job ids start at a random number (PMIx names its /tmp directories after them), so several sessions
on one machine do not collide, and nothing in /etc is touched. The session
fixture `slurm` (imported by tests/conftest.py) yields the running cluster; tests call
`slurm.srun(n, "tests.<layer>.workers.<name>", ...)` the way they call tests.launch.mpirun.
Daemons run as root (slurmd must, to launch tasks as the job's user): elsewhere the tests skip.
"""

from __future__ import annotations

import getpass
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Mapping

import pytest

from tests.launch import ROOT, check, worker_env

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sinfo", "scancel")
INSTALL_HINT = "apt-get install slurmctld slurmd slurm-client munge (scripts/setup.sh does this)"


def slurm_missing_reason() -> str | None:
    """Why a test SLURM cannot be started here, or None when it can."""
    missing = [p for p in DAEMONS + CLIENTS if shutil.which(p) is None]
    if missing:
        return f"SLURM test cluster needs {', '.join(missing)}: {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "SLURM test cluster needs root (slurmd launches tasks as the job's user)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _without_outer_slurm(env: Mapping[str, str]) -> dict[str, str]:
    """Drop SLURM_* of an allocation the tests may be running inside: srun must target our cluster."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_")}


class SlurmCluster:
    """munged + slurmctld + slurmd on this host, all state under one temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pycomm-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.ports = {"slurmctld": _free_port(), "slurmd": _free_port()}
        self.procs: dict[str, subprocess.Popen] = {}
        self.start_seconds = math.nan

    @property
    def env(self) -> dict[str, str]:
        """Environment for SLURM client commands against this cluster."""
        return {**_without_outer_slurm(os.environ), "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        d = self.dir
        for sub in ("spool", "state", "log"):
            (d / sub).mkdir()
        d.chmod(0o755)  # munged wants its socket directory searchable by all
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(f"""\
ClusterName=pycommtest
FirstJobId={random.randint(1000, 10**7)}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={self.ports["slurmctld"]}
SlurmdPort={self.ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        (d / "pmix").mkdir()
        (d / "mpi.conf").write_text(f"PMIxCliTmpDirBase={d}/pmix\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True
        )
        log.close()

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"not ready after {timeout:.0f}s"
                raise RuntimeError(f"SLURM test cluster: waiting for {what}: {why}\n{self.logs()}")
            time.sleep(0.1)

    def _node_idle(self) -> bool:
        out = subprocess.run(
            ["sinfo", "-h", "-n", self.node, "-o", "%T"], env=self.env, capture_output=True, text=True, timeout=30
        ).stdout
        return out.strip() == "idle"

    def start(self, timeout: float = 60) -> "SlurmCluster":
        t0 = time.monotonic()
        try:
            self._write_config()
            d = self.dir
            self._spawn(
                "munged",
                [
                    "munged",
                    "-F",
                    "-f",
                    f"--key-file={d}/munge.key",
                    f"--socket={d}/munge.sock",
                    f"--pid-file={d}/munged.pid",
                    f"--seed-file={d}/munged.seed",
                    f"--log-file={d}/log/munged.log",
                ],
            )
            self._wait("munged", (d / "munge.sock").exists, timeout)
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
            self._wait(f"node {self.node} idle in sinfo", self._node_idle, timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def logs(self) -> str:
        parts = []
        for f in sorted((self.dir / "log").glob("*")) if (self.dir / "log").is_dir() else []:
            parts.append(f"--- {f.name} ---\n" + "\n".join(f.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel what is still running, stop the daemons (children first), remove the directory."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "-u", getpass.getuser()], env=self.env, capture_output=True, timeout=30)
        for name in reversed(DAEMONS):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        shutil.rmtree(self.dir, ignore_errors=True)

    def running(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def srun(
        self,
        n: int,
        module: str,
        *args: str,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
        mpi: str = "pmix",
        expect_ok: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run `python -m module args...` as n tasks of one job step; fail with all output unless it exits 0.
        A failing task ends the step (--kill-on-bad-exit); SLURM's time limit backs up `timeout`."""
        minutes = max(1, math.ceil(timeout / 60) + 1)
        argv = [
            "srun",
            f"--mpi={mpi}",
            "-n",
            str(n),
            "--overcommit",
            "--kill-on-bad-exit=1",
            f"--time={minutes}",
            "--job-name=pycomm-test",
            sys.executable,
            "-m",
            module,
            *args,
        ]
        run_env = {**_without_outer_slurm(worker_env(env)), "SLURM_CONF": str(self.conf)}
        proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout)
        return check(proc, " ".join(argv)) if expect_ok else proc


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """The session's single-node SLURM (started on first use, stopped at session end)."""
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()
