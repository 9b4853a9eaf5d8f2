"""Every algorithm trains the tiny CNN on MNIST (8,000 / 2,000 split) to >= 95% eval accuracy on every
rank with 2 ranks, seeded, within 3 epochs (186 steps of 2 x 64 samples)."""

from __future__ import annotations

import pytest

from tests.algorithms.runs import case
from tests.algorithms.workers.convergence import CASES, TARGET


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(CASES))
def test_reaches_target_accuracy(name: str) -> None:
    for rank, res in enumerate(case("convergence", 2, name, timeout=1800)):
        assert res["accuracy"] >= TARGET, f"rank {rank}: {res}"
        assert res["comm_stats"]["bytes"] > 0
