"""Algorithms communicating through pycomm's int8 and 1-bit codecs (mpirun 2): int8 stays close to
the exact trajectory, both send fewer bytes than the uncompressed run."""
from __future__ import annotations

import pytest

from tests.algorithms.runs import case
from tests.algorithms.workers.codecs import BYTES_RATIO, CASES, CODECS, INT8_TOL


@pytest.mark.mpi
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("name", CASES)
def test_codec(name: str, codec: str) -> None:
    for rank, res in enumerate(case("codecs", 2, f"{name}/{codec}")):
        assert res["finite"], f"rank {rank}: {res}"
        assert res["bytes_ratio"] <= BYTES_RATIO.get((name, codec), 0.85), f"rank {rank}: {res}"
        if codec == "int8":
            assert res["max_diff"] <= INT8_TOL, f"rank {rank}: {res}"
