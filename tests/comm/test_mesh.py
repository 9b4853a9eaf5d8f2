"""pycomm.Mesh: the shape rule (sizes multiply to the ranks, one -1 the rest, ValueErrors naming the sizes),
the rank layout (pp, dp_replicate, dp_shard innermost; dp flattened) in one process. On 4 real ranks
(tests/comm/workers/mesh.py, in test_ranks_per_node's launch): each dimension's communicator, the shared
groups and repr's node facts."""

from __future__ import annotations

import pytest

import pycomm
from pycomm.mesh import coords_of, group_ranks, resolve_shape, server_roles
from tests.launch import mpirun, torchrun


@pytest.mark.parametrize(
    "sizes, words",
    [
        ({"pp": 3}, "pp=3 x dp_replicate=1 x dp_shard=-1 leaves 8/3 ranks for dp_shard"),
        (
            {"pp": 2, "dp_replicate": 2, "dp_shard": 3},
            "pp=2 x dp_replicate=2 x dp_shard=3 = 12 ranks, but the communicator has 8",
        ),
        ({"pp": 0}, "pp=0 must be >= 1 (or -1: the ranks left)"),
        ({"pp": -1, "dp_shard": -1}, "only one size may be -1"),
        ({"dp_replicate": -2}, "dp_replicate=-2 must be >= 1"),
    ],
)
def test_bad_shapes_name_the_sizes(sizes: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        resolve_shape(8, **sizes)
    with pytest.raises(TypeError, match="pycomm.Mesh: pp must be an int"):
        resolve_shape(8, pp=2.0)


def test_layout_puts_dp_shard_innermost() -> None:
    shape = resolve_shape(8, pp=2, dp_replicate=2)
    assert shape == {"pp": 2, "dp_replicate": 2, "dp_shard": 2}
    assert coords_of(5, shape) == {"pp": 1, "dp_replicate": 0, "dp_shard": 1}
    assert group_ranks("dp_shard", shape) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert group_ranks("dp_replicate", shape) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_ranks("pp", shape) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert group_ranks("dp", shape) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(KeyError, match="no dimension 'tp'"):
        group_ranks("tp", shape)


def test_one_rank_mesh_and_roles() -> None:
    world = pycomm.init()
    mesh = pycomm.Mesh(world)
    assert mesh["dp"] is world and mesh.shape == {"pp": 1, "dp_replicate": 1, "dp_shard": 1}
    assert "rank 0 at pp=0, dp_replicate=0, dp_shard=0" in repr(mesh)
    with pytest.raises(TypeError, match="comm must be a pycomm.Communicator"):
        pycomm.Mesh(object())
    roles = server_roles(2, 5, servers=2)
    assert (roles.is_server, roles.index, roles.count, roles.workers) == (False, 0, 3, (2, 3, 4))


@pytest.mark.mpi
@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_ranks_that_ask_for_different_shapes_all_hear_each_ranks_shape(launcher: str) -> None:
    """It used to be accepted on every rank, each with its own shape, and surface only as a stall."""
    env = {"PYCOMM_TIMEOUT": "60"}
    if launcher == "mpirun":
        proc = mpirun(3, "tests.comm.workers.mesh_shapes", "mpi", env=env, timeout=240)
    else:
        proc = torchrun(3, "tests.comm.workers.mesh_shapes", "gloo", env=env, timeout=240)
    out = proc.stdout
    for r in range(3):
        assert (
            f"MARK rank {r} pp: pycomm.Mesh: the ranks of the communicator asked for different shapes (ranks "
            "0, 1: pp=1 x dp_replicate=1 x dp_shard=3; rank 2: pp=3 x dp_replicate=1 x dp_shard=1); every rank "
            "must build the same Mesh at the same point"
        ) in out, out
        assert (
            f"MARK rank {r} invalid: pycomm.Mesh: the ranks of the communicator asked for different shapes "
            "(ranks 0, 1: pp=1 x dp_replicate=1 x dp_shard=3; rank 2: pp=2 x dp_replicate=1 x dp_shard=-1 "
            "(invalid))"
        ) in out, out
        assert f"MARK rank {r} alike accepted {{'pp': 1, 'dp_replicate': 1, 'dp_shard': 3}}" in out, out
        assert f"MARK rank {r} sum 3" in out, out
