"""apps.supervisor, the launcher's automatic restart of parameter-server processes, on real processes: a
server that dies while a worker runs is restarted with `--resume auto` at most PYCOMM_PS_SERVER_RESTARTS
times, each restart logged with its cause; one that dies after the workers are done, or exits 0, is not. A
server given up on stops its workers (which would otherwise wait for it until their server timeout).
The restart of a real server under `python -m apps.train --nproc 4` is in test_ps_faults.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from apps import ps, supervisor
from apps.failure import EXIT_CHECKPOINT
from apps.supervisor import RESTARTS_ENV, Supervisor, resume_argv


def test_resume_argv_replaces_any_resume_option():
    assert resume_argv(["-o", "a=1"]) == ["-o", "a=1", "--resume", "auto"]
    assert resume_argv(["--resume", "/x/ckpt", "-o", "a=1"]) == ["-o", "a=1", "--resume", "auto"]
    assert resume_argv(["--resume=/x/ckpt"]) == ["--resume", "auto"]
    assert resume_argv(["--overwrite", "-o", "a=1"]) == ["-o", "a=1", "--resume", "auto"]  # the launcher replaced once


def starter(tmp_path: Path, server: str, worker: str):
    """Rank 0 runs `server`, rank 1 `worker` (python code); every start of a rank is recorded with its argv."""

    def start(rank: int, argv: Sequence[str]) -> subprocess.Popen:
        with open(tmp_path / "starts.txt", "a") as f:
            f.write(f"{rank} {' '.join(argv)}\n")
        return subprocess.Popen([sys.executable, "-c", server if rank == 0 else worker])

    return start


def starts(tmp_path: Path) -> list[str]:
    return (tmp_path / "starts.txt").read_text().splitlines()


def workers_running(procs: dict[int, subprocess.Popen]) -> bool:
    return procs[1].poll() is None


@pytest.mark.timeout(120)
def test_a_dying_server_is_restarted_with_resume_until_the_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RESTARTS_ENV, "2")
    start = starter(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "import time; time.sleep(600)")
    codes = Supervisor(start, ["-o", "x=1"], [0, 1], [0], workers_running).wait()
    assert codes == {0: -9, 1: -signal.SIGUSR1}  # given up on: its worker is stopped, not left waiting
    assert starts(tmp_path) == ["0 -o x=1", "1 -o x=1", "0 -o x=1 --resume auto", "0 -o x=1 --resume auto"]
    err = capsys.readouterr().err
    assert (
        "apps.launch: server rank 0 was killed by signal 9; restarting it from its latest checkpoint "
        "(--resume auto), restart 1 of 2 (PYCOMM_PS_SERVER_RESTARTS)"
    ) in err, err
    assert "restart 2 of 2" in err and "not restarted: it was restarted 2 times already" in err, err
    assert "stopping worker ranks [1]: they cannot go on without server rank 0" in err, err


@pytest.mark.timeout(120)
def test_a_server_given_up_on_stops_its_workers_and_kills_one_that_ignores_the_stop(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(supervisor, "STOP_GRACE_SECONDS", 2.0)
    ignores_stop = "import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); time.sleep(600)"
    start = starter(tmp_path, f"import time, sys; time.sleep(1); sys.exit({EXIT_CHECKPOINT})", ignores_stop)
    codes = Supervisor(start, [], [0, 1], [0], workers_running).wait()
    assert codes == {0: EXIT_CHECKPOINT, 1: -signal.SIGKILL}, codes
    assert starts(tmp_path) == ["0 ", "1 "]  # a refused checkpoint is never restarted
    err = capsys.readouterr().err
    assert "not restarted: --resume auto would read the same" in err, err
    assert "worker rank 1 did not stop within 2 s of SIGUSR1: killing it" in err, err


@pytest.mark.timeout(120)
def test_a_server_is_not_restarted_once_the_workers_are_done_or_when_it_finished(tmp_path, capsys):
    start = starter(tmp_path, "import time, sys; time.sleep(3); sys.exit(3)", "pass")
    assert Supervisor(start, [], [0, 1], [0], workers_running).wait() == {0: 3, 1: 0}
    (tmp_path / "starts.txt").unlink()
    start = starter(tmp_path, "pass", "import time; time.sleep(3)")
    assert Supervisor(start, [], [0, 1], [0], workers_running).wait() == {0: 0, 1: 0}
    assert starts(tmp_path) == ["0 ", "1 "]
    assert "restarting" not in capsys.readouterr().err


def test_apps_ps_roles_with_several_servers(monkeypatch):
    args, _ = ps.parse(["server", "--address", "127.0.0.1:29500", "--workers", "3", "--rank", "1"])
    monkeypatch.delenv("PYCOMM_PS_SECRET", raising=False)
    with pytest.raises(ValueError, match="PYCOMM_PS_SECRET is not set: export the same secret on every process"):
        ps.role_env(args, 2)  # never taken from a command line
    monkeypatch.setenv("PYCOMM_PS_SECRET", "s" * 32)
    assert ps.role_env(args, 2)["PYCOMM_PS_RANK"] == "1" and ps.role_env(args, 2)["PYCOMM_PS_WORLD"] == "5"
    args, _ = ps.parse(["server", "--address", "127.0.0.1:29500", "--workers", "3", "--rank", "2"])
    with pytest.raises(ValueError, match="server --rank must be in 0..1 for servers=2, got 2"):
        ps.role_env(args, 2)
    args, _ = ps.parse(["worker", "--address", "127.0.0.1:29500", "--workers", "3", "--rank", "1"])
    with pytest.raises(ValueError, match="worker --rank must be in 2..4 for 3 workers, got 1"):
        ps.role_env(args, 2)
