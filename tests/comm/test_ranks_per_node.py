"""PYCOMM_RANKS_PER_NODE declares nodes of k consecutive ranks for split_by_node and pycomm.Mesh (node-aware
code such as hybrid ZeRO tested on one machine); a k that does not divide the world is refused."""

from __future__ import annotations

import pytest

from pycomm.communicator import ranks_per_node
from tests.launch import mpirun


@pytest.mark.mpi
def test_split_by_node_and_mesh_use_declared_node_size() -> None:
    mpirun(4, "tests.comm.workers.ranks_per_node", env={"PYCOMM_RANKS_PER_NODE": "2"}, timeout=120)


def test_declared_node_size_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYCOMM_RANKS_PER_NODE", raising=False)
    assert ranks_per_node(4) is None
    monkeypatch.setenv("PYCOMM_RANKS_PER_NODE", "3")
    with pytest.raises(
        ValueError,
        match=r"PYCOMM_RANKS_PER_NODE=3 does not divide this communicator's 4 ranks into "
        r"whole nodes: expected a divisor of 4 \(1, 2, 4\)",
    ):
        ranks_per_node(4)
    monkeypatch.setenv("PYCOMM_RANKS_PER_NODE", "two")
    with pytest.raises(ValueError, match="PYCOMM_RANKS_PER_NODE='two' is not valid: expected a whole number of ranks"):
        ranks_per_node(4)
