"""lapsgd / lppsgd through algorithms.CommOptimizer: options, the interface on one rank, the averaging
identity and MNIST convergence on 2 real ranks x 2 worker processes."""

from __future__ import annotations

import pytest
import torch

import algorithms
from tests.algorithms import lap_mnist
from tests.algorithms.lap_models import SmallCNN
from tests.algorithms.runs import case
from tests.algorithms.workers import lap_averaging
from tests.algorithms.workers import lap_mnist as lap_mnist_worker
from tests.launch import mpirun


@pytest.mark.parametrize("algorithm", ["lapsgd", "lppsgd"])
@pytest.mark.parametrize(
    "option, value, message",
    [
        ("num_processes", 0, "num_processes must be >= 1"),
        ("num_processes", 1.5, "num_processes must be an integer"),
        ("averaging_freq", 0, "averaging_freq .*must be >= 1"),
        ("pre_post_steps", -1, "pre_post_steps must be >= 0"),
        ("codec", "zip", "codec 'zip' is not a codec name"),
    ],
)
def test_bad_options_raise(algorithm, option, value, message):
    sgd = torch.optim.SGD(SmallCNN().parameters(), lr=0.1)
    with pytest.raises(ValueError, match=message):
        algorithms.CommOptimizer(sgd, algorithm=algorithm, **{option: value})


def test_lppsgd_prepassm_steps_must_be_non_negative():
    sgd = torch.optim.SGD(SmallCNN().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="prepassm_steps must be >= 0"):
        algorithms.CommOptimizer(sgd, algorithm="lppsgd", prepassm_steps=-1)


def test_listed_with_their_options():
    listed = algorithms.available()
    assert set(listed["lapsgd"]) >= {"num_processes", "averaging_freq", "pre_post_steps"}
    assert set(listed["lppsgd"]) >= {"num_processes", "averaging_freq", "pre_post_steps", "prepassm_steps"}


@pytest.mark.mpi
def test_interface_on_one_rank():
    mpirun(1, "tests.algorithms.workers.lap_api", timeout=600)


@pytest.mark.mpi
@pytest.mark.parametrize("final, start_method, codec", lap_averaging.CASES)
def test_averaging_keeps_local_updates_and_ends_equal(final, start_method, codec):
    # one launch runs every case (tests/algorithms/runs.py); each case reports its own result
    for rank, res in enumerate(case("lap_averaging", 2, lap_averaging.name(final, start_method, codec))):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
@pytest.mark.skipif(not lap_mnist.available(), reason="MNIST IDX files not found")
@pytest.mark.parametrize("algorithm, codec", lap_mnist_worker.CASES)
def test_mnist_convergence_2_ranks_x_2_processes(algorithm, codec):
    # one launch trains every case in turn (tests/algorithms/runs.py)
    for rank, res in enumerate(case("lap_mnist", 2, lap_mnist_worker.name(algorithm, codec), timeout=1500)):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
def test_a_worker_failure_stops_every_rank():
    proc = mpirun(2, "tests.algorithms.workers.lap_failure", timeout=600)
    assert proc.stdout.count("failure reported") == 2, proc.stdout


@pytest.mark.mpi
def test_every_minibatch_uses_the_rate_of_its_fractional_epoch():
    # The worker's check is exact. Hogwild may lose an update (two workers' lock-free add_ at the same
    # instant; once in about 30 runs here), which fails it like a wrong rate would: up to 3 runs. A wrong
    # schedule fails every run, a lost update almost never twice.
    failures = []
    for _ in range(3):
        proc = mpirun(1, "tests.algorithms.workers.lap_schedule", timeout=600, expect_ok=False)
        if proc.returncode == 0 and "lap schedule ok" in proc.stdout:
            return
        failures.append(proc.stdout[-2000:] + proc.stderr[-4000:])
    raise AssertionError("3 runs failed:\n" + "\n---\n".join(failures))
