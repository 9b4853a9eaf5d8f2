"""A failing rank ends a 2-rank `python -m apps.train` within seconds with its own error as the last
line (apps.failure, pycomm.abort), faults injected with PYCOMM_APPS_FAIL_AT as torchft's fail_at; the
realistic causes (a corrupt per-rank checkpoint, a checkpoint directory that cannot be made); and
the pieces: the launcher's verdict, Open MPI's messages held back, the fail-at spec."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps import failure, fault_injection
from apps.mpirun_stderr import RULE, MpirunStderr
from tests.apps import runs
from tests.apps.test_train_multi import needs_comm
from tests.launch import ROOT, mpirun, worker_env

FAST = ("-o", "train.max_steps=20", "-o", "train.log_every=1")


def fail_at(spec: str) -> dict[str, str]:
    return {fault_injection.FAIL_AT_ENV: spec}


def last_line(text: str) -> str:
    return text.rstrip("\n").rsplit("\n", 1)[-1]


@pytest.mark.mpi
@needs_comm
def test_a_rank_that_raises_ends_the_job_at_once_with_its_error(tmp_path: Path) -> None:
    w = runs.watch(runs.args(tmp_path, "raise", "plsgd", 2, *FAST), "step 3/", fail_at("1:3:raise"))
    assert w.returncode == failure.EXIT_FAILED, w.output
    assert last_line(w.output) == (
        "rank 1 failed: InjectedFailure: PYCOMM_APPS_FAIL_AT=1:3:raise: injected failure on rank 1 at step 3"
    ), w.output
    assert w.output.count("Traceback") == 1 and "MPI_ABORT" not in w.output, w.output  # one traceback, no banner
    assert w.after_mark < 10, w.output


@pytest.mark.mpi
@needs_comm
def test_a_rank_that_vanishes_ends_the_job_and_is_named(tmp_path: Path) -> None:
    w = runs.watch(runs.args(tmp_path, "exit", "plsgd", 2, *FAST), "step 2/", fail_at("0:2:exit"))
    assert w.returncode == fault_injection.EXIT_INJECTED, w.output
    assert (
        last_line(w.output) == f"rank 0 exited with code {fault_injection.EXIT_INJECTED} without reporting an error"
    ), w.output
    assert "Traceback" not in w.output and RULE not in w.output, w.output
    assert w.after_mark < 10, w.output


def test_a_checkpoint_directory_that_cannot_be_made_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    """Caught where the config is checked: no rank starts, so none can fail at its first save."""
    (tmp_path / "a_file").write_text("")
    argv = runs.args(tmp_path, "nodir", "plsgd", 2, *FAST, "-o", f"checkpoint.directory={tmp_path / 'a_file' / 'ckpt'}")
    proc = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'a_file'} is a file, not a directory" in proc.stderr and "rank" not in proc.stdout, proc
    assert not (tmp_path / "nodir").exists()


@pytest.mark.mpi
@needs_comm
def test_a_corrupt_per_rank_checkpoint_on_resume_ends_the_job_with_rank_1s_error(tmp_path: Path) -> None:
    """Rank 0 loads its files and goes on to train; only rank 1's file is bad. Without the abort rank 0
    waits in its first collective until PYCOMM_TIMEOUT (120 s, past runs.watch's 100 s)."""
    argv = runs.args(tmp_path, "corrupt", "plsgd", 2, "-o", "train.max_steps=10", "-o", "checkpoint.save_best=false")
    runs.run(argv, timeout=300)
    ckpt = sorted((tmp_path / "corrupt" / "checkpoints").glob("ckpt.step*"))[-1]
    rank1 = ckpt / "optim_state_dict.rank1.pt"
    rank1.write_bytes(rank1.read_bytes()[:-8] + b"garbage!")
    w = runs.watch(argv + ["-o", "train.max_steps=20", "--resume", "auto"], "")
    assert w.returncode == failure.EXIT_CHECKPOINT, w.output
    assert last_line(w.output) == (
        f"rank 1 failed: CheckpointError: checkpoint file {rank1} is corrupt: its SHA-256 "
        "differs from the one in manifest.json (its contents changed after it was "
        "written)"
    ), w.output
    assert "rank 0 failed" not in w.output, w.output  # rank 0 only stopped because rank 1 failed
    assert "Traceback" not in w.output and "StallError" not in w.output, w.output  # its message is the story


@pytest.mark.mpi
@needs_comm
def test_under_the_users_own_mpirun_the_failing_rank_prints_its_summary(tmp_path: Path) -> None:
    proc = mpirun(
        2,
        "apps.train",
        *runs.args(tmp_path, "own", "plsgd", 2, *FAST)[2:],
        env=fail_at("1:3:raise"),
        expect_ok=False,
        timeout=100,
    )
    assert proc.returncode == failure.EXIT_FAILED, proc.stdout + proc.stderr
    summary = "rank 1 failed: InjectedFailure: PYCOMM_APPS_FAIL_AT=1:3:raise: injected failure on rank 1 at step 3"
    assert proc.stderr.count(summary) == 1 and proc.stderr.count("Traceback") == 1, proc.stderr


def test_verdict_groups_ranks_that_failed_alike_and_puts_the_first_first(tmp_path: Path) -> None:
    for rank, kind in ((2, "OSError"), (0, "OSError"), (1, "ValueError")):
        failure.record(tmp_path, failure.Failure(rank, 3, kind, "disk full" if kind == "OSError" else "bad", 1))
    assert failure.verdict(failure.read(tmp_path)) == [
        "ranks 2, 0 failed: OSError: disk full",
        "rank 1 failed: ValueError: bad",
    ]


def test_only_the_first_failing_rank_is_first(tmp_path: Path) -> None:
    first = [failure.record(tmp_path, failure.Failure(r, 4, "E", "m", 1)) for r in (3, 1, 2)]
    assert first == [True, False, False]
    assert [f.rank for f in failure.read(tmp_path)] == [3, 1, 2]


def test_a_message_becomes_one_line_and_a_single_process_has_no_rank() -> None:
    assert failure.Failure.of(ValueError("a\n  b"), 0, 1).line() == "failed: ValueError: a b"
    assert failure.Failure.of(KeyboardInterrupt(), 1, 2).line() == "rank 1 failed: KeyboardInterrupt: (no message)"


@pytest.mark.parametrize("spec", ["1", "a:2", "1:2:crash", "-1:2", "1:2:held"])
def test_a_bad_fail_at_spec_is_refused_with_the_expected_form(spec: str) -> None:
    with pytest.raises(ValueError, match="RANK:STEP"):
        fault_injection.injected_at({fault_injection.FAIL_AT_ENV: spec})
    assert fault_injection.injected_at({fault_injection.FAIL_AT_ENV: "1:5"}) == (1, 5, "raise")


def test_a_hold_keeps_the_rank_at_its_step_until_a_signal_comes(tmp_path: Path) -> None:
    """PYCOMM_APPS_FAIL_AT=0:5:hold (what runs.preempt and runs.interrupt set): no step after 5 until the
    SIGTERM, which is then taken at step 5 itself, however fast the run."""
    proc = subprocess.Popen(
        [sys.executable, "-u", *runs.args(tmp_path, "hold", "none", 1, *FAST)],
        cwd=ROOT,
        env=worker_env(fail_at("0:5:hold")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "step 5/" in line:
            break
    time.sleep(3)  # what a 20-step run needs many times over; held, it logs nothing more
    assert proc.poll() is None, "".join(lines)
    proc.send_signal(signal.SIGTERM)
    out = "".join(lines) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 0 and "step 6/" not in out, out
    assert "preempted (signal 15) at step 5: saved" in out, out


def test_open_mpi_messages_are_held_back_and_summarised() -> None:
    banner = [
        RULE,
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "the job to be terminated. The first process to do so was:",
        "",
        "  Process name: [[18847,1],1]",
        "  Exit code:    7",
        RULE,
    ]
    text = (
        "\n".join(
            [
                "rank output",
                *banner,
                "[vm:1] 1 more process has sent help message help-mpi-api.txt",
                "more rank output",
                f"{RULE} not a frame",
            ]
        )
        + "\n"
    )
    sink = io.StringIO()
    stderr = MpirunStderr(io.BytesIO(text.encode()), sink)
    stderr.join()
    assert sink.getvalue() == f"rank output\nmore rank output\n{RULE} not a frame\n"
    assert stderr.summary() == "rank 1 exited with code 7 without reporting an error"
    assert "".join(stderr.held).count("Process name") == 1


def test_an_unclosed_frame_is_not_open_mpis_and_passes_through() -> None:
    sink = io.StringIO()
    MpirunStderr(io.BytesIO(f"{RULE}\nmy table\n".encode()), sink).join()
    assert sink.getvalue() == f"{RULE}\nmy table\n"


def test_a_rank_killed_by_a_signal_is_named() -> None:
    """Open MPI 4.1's words for a rank killed by SIGKILL (the OOM killer's signal)."""
    text = f"{RULE}\nmpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n{RULE}\n"
    stderr = MpirunStderr(io.BytesIO(text.encode()), io.StringIO())
    stderr.join()
    assert stderr.summary() == "rank 1 was killed by signal 9 (Killed)"
