"""Which ranks share a ZeRO shard: all of them, or (hybrid) the ranks of one node, the shard then
being replicated across nodes (the training-stub's zero2_hybrid / zero3_hybrid)."""
from __future__ import annotations

from typing import Any


def shard_communicators(comm: Any, hybrid: bool) -> tuple[Any, Any]:
    """(shard_comm, replica_comm): the ranks a flat group is split over, and the ranks holding the same
    shard (None when not hybrid). Hybrid nodes are the real ones or PYCOMM_RANKS_PER_NODE's."""
    if not hybrid:
        return comm, None
    intra, inter = comm.split_by_node()
    return intra, (inter if inter.size > 1 else None)
