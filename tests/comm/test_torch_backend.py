"""Backend "pycomm" of torch.distributed (pycomm/torch_backend): unchanged torch.distributed code on real
ranks (tests/comm/workers/torch_backend.py) under mpirun, with no torch variables set (pycomm's MPI
rendezvous), under srun (--mpi=pmix: MPI; --mpi=none: pycomm's gloo transport; no torch variables either),
and under torchrun (env://, pycomm's gloo transport): every supported op against expected values
(all-to-alls with unequal chunks too), DDP against DDP on gloo on 2 and 4 ranks, and a mismatched
collective raising pycomm's MismatchError (MPI's op check, and the gloo transport's)."""

from __future__ import annotations

import re

import pytest

from tests.launch import mpirun, python, torchrun
from tests.slurm import SlurmCluster

ENV = {"PYCOMM_TIMEOUT": "60", "PYTHONWARNINGS": "ignore::FutureWarning"}


def _passed(stdout: str, what: str) -> list[str]:
    return sorted(re.findall(rf"rank (\d): {what}", stdout))


@pytest.mark.mpi
def test_ops_under_mpirun():
    proc = mpirun(4, "tests.comm.workers.torch_backend", "ops", env=ENV)
    assert _passed(proc.stdout, "ops passed") == ["0", "1", "2", "3"], proc.stdout


def test_ops_under_torchrun():
    proc = torchrun(2, "tests.comm.workers.torch_backend", "ops", env=ENV)
    assert _passed(proc.stdout, "ops passed") == ["0", "1"], proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_ddp_on_pycomm_matches_ddp_on_gloo(ranks):
    proc = mpirun(ranks, "tests.comm.workers.torch_backend", "ddp", env=ENV)
    assert _passed(proc.stdout, "ddp on pycomm == gloo") == [str(r) for r in range(ranks)], proc.stdout


@pytest.mark.slurm
@pytest.mark.parametrize(
    "mpi,extra,transport",
    [("pmix", {}, "mpi"), ("none", {"MASTER_ADDR": "127.0.0.1"}, "gloo")],
    ids=["pmix", "mpi-none"],
)
def test_ddp_on_pycomm_under_srun(slurm: SlurmCluster, mpi: str, extra: dict[str, str], transport: str):
    # init_process_group("pycomm") with only SLURM's variables (it used to fail under --mpi=none: torch's env://
    # wanted RANK); --mpi=none has no MPI wire-up, so pycomm's world runs on its gloo transport
    proc = slurm.srun(2, "tests.comm.workers.torch_backend", "ddp", mpi=mpi, env={**ENV, **extra}, timeout=300)
    assert _passed(proc.stdout, "ddp on pycomm == gloo") == ["0", "1"], proc.stdout
    assert proc.stdout.count(f"launcher slurm, transport {transport})") == 2, proc.stdout


@pytest.mark.parametrize(
    "launcher", [pytest.param(mpirun, marks=pytest.mark.mpi), torchrun], ids=["mpirun", "torchrun"]
)
def test_mismatched_collective_raises_mismatch_error(launcher):
    proc = launcher(2, "tests.comm.workers.torch_backend", "mismatch", env=ENV)
    assert _passed(proc.stdout, "MismatchError") == ["0", "1"], proc.stdout
    # each rank's message names both ranks' ops
    assert proc.stdout.count("rank 0 submitted allreduce #1") == 2, proc.stdout
    assert proc.stdout.count("rank 1 submitted broadcast #1") == 2, proc.stdout


@pytest.mark.mpi
def test_stopped_rank_under_ddp_ends_the_job_with_the_stall_report():
    # rank 1 stops in the middle of DDP training: rank 0's DDP all-reduce reaches the caller of backward() as
    # pycomm's StallError naming rank 1 (it used to crash DDP's reducer), and fail-fast ends the job, with
    # rank 0's traceback shown (torch's excepthook used to swallow it)
    proc = mpirun(
        2, "tests.comm.workers.torch_backend", "dead", env={**ENV, "PYCOMM_TIMEOUT": "5"}, expect_ok=False, timeout=240
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rank 1: stopping at step" in out, out
    assert "loss.backward()" in out, out
    assert re.search(
        r"RuntimeError: .*StallError: allreduce #\d+ .* waiting for rank 1: rank 1 stood still .*its "
        r"process is stopped or hung",
        out,
    ), out
    assert "pycomm: rank 0 of 2 raised an uncaught RuntimeError; ending the job" in out, out


def test_ranks_spawned_by_torch_multiprocessing():
    # no launcher pycomm reads: the default group runs on pycomm's gloo transport over torch's store (it used to
    # fail: pycomm's launcher saw one process)
    proc = python("tests.comm.workers.torch_backend_spawn", env=ENV, timeout=240)
    assert _passed(proc.stdout, "spawned ranks on gloo") == ["0", "1", "2"], proc.stdout
