"""opt.clip_grad_norm_ on every method class, on 4 real ranks (tests/algorithms/workers/clipping.py): equal to
torch's clip_grad_norm_ on the unsplit model for data parallelism (mbsgd, zero1/2/3, hybrid zero2), to the
rank's own for local SGD, summed over the stages of a pipeline (pp x mbsgd, pp x zero2/zero3, the Pipeline's
own); torch's clip on the parameters under zero2/zero3 raises naming opt.clip_grad_norm_; syncps's workers
clip their own gradient and its server refuses (3 ranks). In-process:
argument checks and the methods that hold no gradient in the user's loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import algorithms
from algorithms import clipping
from tests.algorithms.runs import case
from tests.algorithms.workers.clipping import LOCAL, NORMS
from tests.launch import mpirun

CASES = (
    [f"dp_{m}_{n}" for n in NORMS for m in ("mbsgd", "zero2", "zero3")]
    + [f"local_plsgd_{n}" for n in NORMS]
    + ["dp_zero1_l2", "dp_zero2_hybrid_l2", "dp_zero2_hybrid_inf", "across_zero2_plsgd_l2"]
    + [f"local_{m}_l2" for m in LOCAL]
    + [f"pp_{m}_{n}" for m in ("torch", "mbsgd", "zero2", "zero3") for n in ("l2", "inf")]
)


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    import pycomm

    pycomm.init()


@pytest.mark.mpi
@pytest.mark.parametrize("name", CASES)
def test_clip_equals_torch_on_the_reference(name: str) -> None:
    for rank, res in enumerate(case("clipping", 4, name)):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["mbsgd", "zero1", "zero2", "zero3"])
def test_torch_clip_on_the_parameters_works_or_names_opt_clip(method: str) -> None:
    for rank, res in enumerate(case("clipping", 4, f"torch_clip_{method}")):
        assert res["ok"], (rank, res)


@pytest.mark.mpi
def test_parameter_server_workers_clip_their_own_gradient(tmp_path: Path) -> None:
    mpirun(3, "tests.algorithms.workers.ps_clip", str(tmp_path), timeout=300)
    for rank in range(3):
        res = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert res["ok"], (rank, res)


def test_total_norm_of_one_rank_is_torchs() -> None:
    grads = [torch.randn(3, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)]
    for order in (0.5, 1.0, 2.0, 3.0, float("inf")):
        want = torch.nn.utils.get_total_norm(grads, order)
        assert torch.allclose(clipping.total_norm(grads, order), want, rtol=1e-12), order


@pytest.mark.parametrize("bad", [0, -1.0, "two", None])
def test_a_norm_type_that_cannot_combine_is_refused(bad) -> None:
    model = torch.nn.Linear(3, 2)
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="mbsgd", model=model)
    model(torch.randn(4, 3)).sum().backward()
    with pytest.raises(ValueError, match="norm_type must be"):
        opt.clip_grad_norm_(1.0, bad)


def test_nonfinite_norm_raises_when_asked() -> None:
    model = torch.nn.Linear(3, 2)
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="zero2", model=model)
    model(torch.full((4, 3), float("inf"))).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        opt.clip_grad_norm_(1.0, error_if_nonfinite=True)


@pytest.mark.parametrize("algorithm", ["lapsgd", "lppsgd"])
def test_own_loop_methods_point_to_max_grad_norm(algorithm: str) -> None:
    model = torch.nn.Linear(3, 2)
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm, model=model)
    with pytest.raises(RuntimeError, match=r"max_grad_norm=1.0 to opt.train"):
        opt.clip_grad_norm_(1.0)
