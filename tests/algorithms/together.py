"""The rank workers whose cases share one launch per world size (tests/algorithms/workers/together.py):
the rule, equivalence and overlap tests on 2 ranks, the rule and equivalence tests on 4."""

from __future__ import annotations

from typing import Any

from tests.algorithms.runs import case

TOGETHER = {2: ("equivalences", "overlap", "rules"), 4: ("equivalences", "rules")}


def together_case(worker: str, n: int, name: str) -> list[dict[str, Any]]:
    """Every rank's result for `worker`'s case `name` on n ranks, from the one launch of TOGETHER[n]."""
    if worker not in TOGETHER.get(n, ()):
        raise ValueError(f"{worker!r} on {n} ranks does not share a launch; expected one of {TOGETHER}")
    return case("together", n, f"{worker}/{name}", *TOGETHER[n])
