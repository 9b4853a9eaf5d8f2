"""Per-rank bytes of parameters + gradients + optimizer state on 4 ranks within 10% of the ZeRO
formulas (DDP 16 Psi, stage 1 (4 + 12/N) Psi, stage 2 (2 + 14/N) Psi, stage 3 16 Psi / N), counted from
the live tensors after a step (byte counts, not RSS: no noise)."""

from __future__ import annotations

import pytest

from tests.algorithms.runs import case
from tests.algorithms.workers.zero_memory import TOLERANCE


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["ddp", "zero1", "zero2", "zero3"])
def test_bytes_per_rank_match_formula(algorithm: str) -> None:
    for rank, res in enumerate(case("zero_memory", 4, algorithm)):
        assert res["ok"], f"rank {rank}: {res} (tolerance {TOLERANCE:.0%})"
