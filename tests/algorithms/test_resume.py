"""Resuming from a mid-run state_dict (per rank) continues the uninterrupted trajectory bit for bit."""
from __future__ import annotations

import pytest

from tests.algorithms.runs import case
from tests.algorithms.workers.resume import CASES


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", CASES)
def test_resume_continues_trajectory(name: str, n: int) -> None:
    for rank, res in enumerate(case("resume", n, name)):
        assert res["max_diff"] == 0.0, f"rank {rank}: {res}"
