"""`python -m apps.train` on 2 real ranks: under mpirun, through --nproc (which re-runs itself under
mpirun), and under srun on the test SLURM; preemption of a 2-rank run and an exact resume."""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import pytest

from tests.apps import runs
from tests.launch import mpirun

try:  # what the algorithms use (algorithms/channel.py) must be in this pycomm
    from pycomm import Communicator

    HAVE_COMM = hasattr(Communicator, "allreduce_coalesced")
except ImportError:
    HAVE_COMM = False

needs_comm = pytest.mark.skipif(
    not HAVE_COMM, reason="pycomm.Communicator.allreduce_coalesced (used by the algorithms) is not in this pycomm yet"
)


@pytest.fixture(scope="module")
def under_mpirun(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A whole 2-rank plsgd run under a plain mpirun (its directory, its output): checked as such, and the
    uninterrupted run that a preempted and resumed --nproc run must end equal to."""
    out = tmp_path_factory.mktemp("mpirun")
    proc = mpirun(2, "apps.train", *runs.args(out, "plsgd", "plsgd", 2)[2:], timeout=400)
    return out / "plsgd", proc.stdout


@pytest.mark.mpi
@needs_comm
def test_two_ranks_under_mpirun(under_mpirun: tuple[Path, str]) -> None:
    run_dir, stdout = under_mpirun
    _check_two_rank_run(stdout, run_dir, per_rank=True)


def _check_two_rank_run(stdout: str, run_dir: Path, per_rank: bool) -> None:
    assert "over 2 rank(s)" in stdout and "step 60/60" in stdout
    rows = list(csv.DictReader(open(run_dir / "train.csv")))
    assert float(rows[-1]["comm_bytes"]) > 0
    last = sorted((run_dir / "checkpoints").glob("ckpt.step*"))[-1]
    assert (last / "optim_state_dict.rank1.pt").exists() == per_rank  # local methods: per-rank state


@pytest.mark.mpi
@needs_comm
def test_sigterm_to_the_whole_process_group_is_a_clean_preemption(tmp_path: Path) -> None:
    """mpirun got the group's SIGTERM too and killed the ranks (mid-save on a large model); the run ended
    "mpirun exited with code 1". It runs in a group of its own now: only the launcher's forward reaches it."""
    out = runs.preempt(runs.args(tmp_path, "group", "plsgd", 2), whole_group=True, timeout=400).stdout
    assert "preempted" in out and "mpirun exited" not in out, out
    assert len(list((tmp_path / "group" / "checkpoints").glob("*.preempt"))) == 1, out


@pytest.mark.mpi
@needs_comm
def test_a_run_whose_timeout_runs_out_is_a_clean_preemption(tmp_path: Path) -> None:
    """GNU `timeout` signals its command, then its whole process group. A SIGALRM to `timeout` is its own
    timer running out, so the test waits for no clock; --preserve-status: timeout exits with the run's code."""
    out = runs.preempt(
        runs.args(tmp_path, "timeout", "plsgd", 2),
        sig=signal.SIGALRM,
        via=["timeout", "--preserve-status", "1000"],
        timeout=400,
    ).stdout
    assert "preempted" in out and "mpirun exited" not in out, out
    assert len(list((tmp_path / "timeout" / "checkpoints").glob("*.preempt"))) == 1, out


@pytest.mark.mpi
@needs_comm
def test_nproc_run_preempted_by_sigterm_resumes_to_the_uninterrupted_parameters(
    tmp_path: Path, under_mpirun: tuple[Path, str]
) -> None:
    argv = runs.args(tmp_path, "cut", "plsgd", 2)
    out = runs.preempt(argv, timeout=400).stdout  # SIGTERM to the --nproc supervisor, forwarded to the ranks
    assert "preempted" in out, out
    assert len(list((tmp_path / "cut" / "checkpoints").glob("*.preempt"))) == 1
    runs.run(argv + ["--resume", "auto"], timeout=400)
    for rank in (0, 1):
        runs.assert_same(runs.final_params(under_mpirun[0], rank), runs.final_params(tmp_path / "cut", rank))


@pytest.mark.slurm
@needs_comm
def test_two_ranks_under_srun(slurm, tmp_path: Path) -> None:
    proc = slurm.srun(2, "apps.train", *runs.args(tmp_path, "srun", "mbsgd", 2)[2:], timeout=400)
    _check_two_rank_run(proc.stdout, tmp_path / "srun", per_rank=False)  # mbsgd: ranks identical


@pytest.mark.mpi
@needs_comm
def test_sigterm_repeated_to_the_nproc_launcher_after_the_preempt_save_exits_0(tmp_path: Path) -> None:
    """The launcher forwards the first signal only (before: each one, as SIGUSR1, and one arriving after a
    rank's save killed it with exit 138)."""
    proc = runs.preempt_repeatedly(runs.args(tmp_path, "again", "plsgd", 2), timeout=400)
    assert proc.returncode == 0, proc.stdout
    assert "preempted" in proc.stdout and "signal 15 ignored" in proc.stdout, proc.stdout
    assert len(list((tmp_path / "again" / "checkpoints").glob("*.preempt"))) == 1, proc.stdout


@pytest.mark.mpi
@needs_comm
def test_ctrl_c_to_the_nproc_launcher_ends_with_one_line_not_a_traceback(tmp_path: Path) -> None:
    proc = runs.interrupt(runs.args(tmp_path, "ctrl_c", "plsgd", 2, "-o", "train.log_every=1"), timeout=100)
    assert proc.returncode != 0, proc.stdout
    assert proc.stdout.rstrip().rsplit("\n", 1)[-1].startswith("interrupted: mpirun stopped the ranks"), proc.stdout
    assert "Traceback" not in proc.stdout and "-" * 74 not in proc.stdout, proc.stdout
