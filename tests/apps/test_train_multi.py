"""`python -m apps.train` on 2 real ranks: under mpirun, through --nproc (which re-runs itself under
mpirun), and under srun on the test SLURM; preemption of a 2-rank run and an exact resume."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.apps import runs
from tests.launch import mpirun

try:  # what the algorithms use (algorithms/channel.py) must be in this pycomm
    from pycomm import Communicator
    HAVE_COMM = hasattr(Communicator, "allreduce_coalesced")
except ImportError:
    HAVE_COMM = False

needs_comm = pytest.mark.skipif(not HAVE_COMM, reason="pycomm.Communicator.allreduce_coalesced (used by the "
                                                      "algorithms) is not in this pycomm yet")


@pytest.mark.mpi
@needs_comm
@pytest.mark.parametrize("algorithm", ["plsgd", "mbsgd"])
def test_two_ranks_under_mpirun(tmp_path: Path, algorithm: str) -> None:
    proc = mpirun(2, "apps.train", *runs.args(tmp_path, algorithm, algorithm, 2)[2:], timeout=400)
    assert "over 2 rank(s)" in proc.stdout and "step 60/60" in proc.stdout
    rows = list(csv.DictReader(open(tmp_path / algorithm / "train.csv")))
    assert float(rows[-1]["comm_bytes"]) > 0
    last = sorted((tmp_path / algorithm / "checkpoints").glob("ckpt.step*"))[-1]
    assert (last / "optim_state_dict.rank1.pt").exists() == (algorithm == "plsgd")  # local method: per-rank state


@pytest.mark.mpi
@needs_comm
def test_nproc_run_preempted_by_sigterm_resumes_to_the_uninterrupted_parameters(tmp_path: Path) -> None:
    runs.run(runs.args(tmp_path, "straight", "plsgd", 2), timeout=400)
    argv = runs.args(tmp_path, "cut", "plsgd", 2)
    out = runs.preempt(argv, timeout=400).stdout   # SIGTERM to the --nproc supervisor, forwarded to the ranks
    assert "preempted" in out, out
    assert len(list((tmp_path / "cut" / "checkpoints").glob("*.preempt"))) == 1
    runs.run(argv + ["--resume", "auto"], timeout=400)
    for rank in (0, 1):
        runs.assert_same(runs.final_params(tmp_path / "straight", rank), runs.final_params(tmp_path / "cut", rank))


@pytest.mark.slurm
@needs_comm
def test_two_ranks_under_srun(slurm, tmp_path: Path) -> None:
    proc = slurm.srun(2, "apps.train", *runs.args(tmp_path, "srun", "plsgd", 2)[2:], timeout=400)
    assert "over 2 rank(s)" in proc.stdout and "step 60/60" in proc.stdout
