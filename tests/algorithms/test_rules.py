"""Each update rule on real ranks (mpirun 2 and 4; the SDTL-specific ones on 3 too) against the
independent N-worker simulation."""

from __future__ import annotations

import pytest

from tests.algorithms.configs import RULES, SDTL_RULES_ON_THREE
from tests.algorithms.runs import case
from tests.algorithms.together import together_case

TOL = 1e-6


def _check(name: str, n: int, *only: str) -> None:
    per_rank = case("rules", n, name, *only) if only else together_case("rules", n, name)
    for rank, res in enumerate(per_rank):
        assert res["max_diff"] <= TOL, (
            f"rank {rank}: max |pycomm - simulation| = {res['max_diff']:.3g} per step {res['per_step']}"
        )
        assert res["comm_stats"]["bytes"] > 0 and res["comm_stats"]["calls"] > 0
    if RULES[name][0] != "mbsgd":  # simulated workers diverge between rounds: the comparison is not vacuous
        assert per_rank[0]["worker_spread"] > 1e-4, per_rank[0]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", list(RULES))
def test_rule_matches_simulation(name: str, n: int) -> None:
    _check(name, n)


@pytest.mark.mpi
@pytest.mark.parametrize("name", SDTL_RULES_ON_THREE)
def test_seed_rule_matches_simulation_on_three_ranks(name: str) -> None:
    """EASGD+'s restarted centre and LSGD's proxy leader, several rounds with local pulling, 3 ranks."""
    _check(name, 3, *SDTL_RULES_ON_THREE)
