"""mbsgd on N ranks == one process on the concatenated batch; plsgd H=1 == mbsgd; qsr alpha=0 ==
plsgd with H = h_base; diloco with outer SGD lr 1 and no momentum == plsgd with the same H; easgd with
zero strengths == independent local SGD (mpirun 2 and 4)."""

from __future__ import annotations

import pytest

from tests.algorithms.together import together_case
from tests.algorithms.workers.equivalences import CASES, TOL


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_equivalence(name: str, n: int) -> None:
    for rank, res in enumerate(together_case("equivalences", n, name)):
        assert res["max_diff"] <= TOL, f"rank {rank}: {res}"
        assert res["moved"] > 0, f"rank {rank}: the parameters never changed: {res}"
