"""Resuming from a mid-run state_dict (per rank) continues the uninterrupted trajectory bit for bit."""

from __future__ import annotations

import pytest
import torch

import algorithms
import pycomm
from tests.algorithms.runs import case
from tests.algorithms.workers.resume import CASES


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", CASES)
def test_resume_continues_trajectory(name: str, n: int) -> None:
    for rank, res in enumerate(case("resume", n, name)):
        assert res["max_diff"] == 0.0, f"rank {rank}: {res}"


def test_easgd_plus_state_without_its_round_start_is_refused() -> None:
    """A state written before easgd+ kept the centre its next round starts from cannot resume exactly."""
    pycomm.init()
    opt = algorithms.CommOptimizer(torch.optim.SGD([torch.zeros(3, requires_grad=True)], lr=0.1), algorithm="easgd+")
    state = opt.state_dict()
    del state["algorithm_state"]["restart"]
    with pytest.raises(ValueError, match="no 'restart'"):
        opt.load_state_dict(state)
