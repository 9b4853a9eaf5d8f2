"""Algorithms communicating through pycomm's int8, int4 and 1-bit codecs (mpirun 2): int8 and int4 stay
close to the exact trajectory, all send fewer bytes than the uncompressed run."""

from __future__ import annotations

import pytest

from tests.algorithms.runs import case
from tests.algorithms.workers.codecs import BYTES_RATIO, CASES, CODECS, TOLERANCES


@pytest.mark.mpi
@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("name", CASES)
def test_codec(name: str, codec: str) -> None:
    for rank, res in enumerate(case("codecs", 2, f"{name}/{codec}")):
        assert res["finite"], f"rank {rank}: {res}"
        assert res["bytes_ratio"] <= BYTES_RATIO.get((name, codec), 0.85), f"rank {rank}: {res}"
        if codec in TOLERANCES:
            assert res["max_diff"] <= TOLERANCES[codec], f"rank {rank}: {res}"
