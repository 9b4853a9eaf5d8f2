"""overlap_backward: gradient reductions started during backward give the parameters of the same
reductions started after it, bit for bit, for mbsgd and ZeRO 1/2/3 on 2 real ranks, and only the
overlapped run starts a bucket while backward still runs; bad values are refused naming the option."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from algorithms import OptionError
from tests.algorithms.together import together_case
from tests.algorithms.workers.overlap import ALGORITHMS


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2])
@pytest.mark.parametrize("name", ALGORITHMS)
def test_overlapped_equals_after_backward(name: str, n: int) -> None:
    for rank, res in enumerate(together_case("overlap", n, name)):
        assert res["ok"], f"rank {rank}: {res}"


@pytest.mark.parametrize("name", ALGORITHMS)
def test_overlap_backward_must_be_a_bool(name: str) -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OptionError, match="overlap_backward must be True or False, got 'no'"):
        algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), algorithm=name, model=model, overlap_backward="no"
        )


def test_gradient_buckets_overlap_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="overlap must be True or False, got 1"):
        pycomm.GradientBuckets([torch.nn.Parameter(torch.ones(2))], launch=lambda b: None, overlap=1)
