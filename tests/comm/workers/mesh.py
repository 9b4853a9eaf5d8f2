"""pycomm.Mesh on 4 real ranks with PYCOMM_RANKS_PER_NODE=2 (nodes {0,1} and {2,3}), run by
tests/comm/workers/ranks_per_node.py's launch. pp=2 x dp_shard=2: each dimension's communicator holds
exactly the ranks the layout names (a sum of the ranks over it says who is in it), groups of the same
ranks share one communicator, a dimension spanning the world is the world itself,
coords/shape/ranks/spans_nodes/repr agree, and Mesh.across_nodes puts a node in dp_shard. An
AssertionError names the failed check."""

from __future__ import annotations

import torch

import pycomm
from pycomm import SUM


def total(comm: pycomm.Communicator) -> int:
    t = torch.tensor([float(pycomm.world().rank)])
    comm.allreduce(t, op=SUM)
    return int(t.item())


def check(world: pycomm.Communicator) -> None:
    r = world.rank
    mesh = pycomm.Mesh(world, pp=2, dp_replicate=1, dp_shard=-1)
    assert mesh.shape == {"pp": 2, "dp_replicate": 1, "dp_shard": 2}, mesh.shape
    assert mesh.coords == {"pp": r // 2, "dp_replicate": 0, "dp_shard": r % 2}, (r, mesh.coords)
    # pp: ranks 2 apart ({0,2}, {1,3}); dp_shard and dp: consecutive pairs; dp_replicate: this rank alone
    assert total(mesh["pp"]) == 2 * (r % 2) + 2, (r, "pp")
    assert total(mesh["dp_shard"]) == 4 * (r // 2) + 1, (r, "dp_shard")
    assert mesh["dp"] is mesh["dp_shard"] and mesh["dp_replicate"].size == 1
    assert mesh.ranks("pp") == [r % 2, r % 2 + 2] and mesh.groups("dp") == [[0, 1], [2, 3]]
    assert mesh.spans_nodes("pp") and not mesh.spans_nodes("dp_shard")
    text = repr(mesh)
    for line in (
        "pp: 2 group(s) of 2 rank(s): [0, 2] [1, 3]; each spans nodes",
        "dp_shard: 2 group(s) of 2 rank(s): [0, 1] [2, 3]; each within one node",
        "dp: the groups of dp_shard",
        "on 2 node(s)",
    ):
        assert line in text, f"{line!r} not in\n{text}"
    whole = pycomm.Mesh(world)  # 1-D: every data-parallel dimension is the world
    assert whole["dp"] is world and whole["dp_shard"] is world and whole["pp"].size == 1
    nodes = pycomm.Mesh.across_nodes(world)
    assert nodes.shape == {"pp": 1, "dp_replicate": 2, "dp_shard": 2}, nodes.shape
    assert total(nodes["dp_replicate"]) == 2 * (r % 2) + 2, (r, "dp_replicate")
    try:
        pycomm.Mesh(world, pp=3)
    except ValueError as e:
        assert "pp=3 x dp_replicate=1 x dp_shard=-1" in str(e) and "4 ranks" in str(e), str(e)
    else:
        raise AssertionError("pp=3 on 4 ranks was accepted")
