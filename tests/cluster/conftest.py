"""The emulated cluster the tests of this folder run on (benchmarks/cluster.py): 2 nodes x 2 ranks at
1 Gbit/s, one per test module; skipped with the reason where it cannot be made."""

from __future__ import annotations

from typing import Iterator

import pytest

from benchmarks.cluster import Cluster, leftovers, unavailable


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Cluster(nodes=2, ranks_per_node=2, rate="1gbit") as c:
        yield c
    assert leftovers(c.name) == [], "the cluster left namespaces or links behind"
