"""pycomm.Mesh: the parallel layout every parallelism takes its dimension from (torchtitan's ParallelDims).

    mesh = pycomm.Mesh(comm, pp=2, dp_replicate=1, dp_shard=2)   # sizes multiply to comm.size; one may be -1
    mesh["pp"], mesh["dp_replicate"], mesh["dp_shard"]             # the ranks that differ only in that dim
    mesh["dp"]                                                     # dp_replicate x dp_shard: the data-parallel group
    mesh.coords, mesh.shape                                        # {"pp": i, ...}, {"pp": 2, ...}

Dimensions in the order pp, dp_replicate, dp_shard, dp_shard innermost: rank = (pp * dp_replicate_size +
dp_replicate) * dp_shard_size + dp_shard, so a shard group is consecutive ranks (one node where it fits,
under a launcher that places ranks node by node), the replicas of a shard are dp_shard ranks apart and the
stages of a pipeline dp_replicate x dp_shard ranks apart (pipeline traffic, the lightest per step, is the
one that crosses nodes first). Every sub-communicator is built once, when the Mesh is made (a collective
over `comm`: every rank builds the same Mesh at the same point; the ranks first agree on its shape, and ranks
that asked for different ones all get a ValueError naming each rank's), and groups made of the same ranks share
one communicator (with dp_replicate = 1, mesh["dp"] is mesh["dp_shard"]; a dimension spanning the whole
communicator is `comm` itself). `repr(mesh)` lists which ranks form which group and whether a group spans
nodes (nodes: the hosts, or PYCOMM_RANKS_PER_NODE's blocks of consecutive ranks).

`server_roles(rank, world, servers)`: the one other way ranks are divided, by role (parameter servers
first, then the workers), for algorithms whose ranks do not share collectives (algorithms/ps)."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import torch

from pycomm._validate import check_int
from pycomm.communicator import Communicator, ranks_per_node

DIMS = ("pp", "dp_replicate", "dp_shard")
# flattened dimensions: their groups are the ranks that differ in any of these
FLATTENED = {"dp": ("dp_replicate", "dp_shard")}
NAMES = DIMS + tuple(FLATTENED)
_SHOWN_GROUPS = 8  # repr lists at most this many groups of a dimension

# node of every rank, per communicator (one all-gather per communicator, however many meshes use it)
_NODES: "weakref.WeakKeyDictionary[Communicator, list[int]]" = weakref.WeakKeyDictionary()


def resolve_shape(world: int, pp: Any = 1, dp_replicate: Any = 1, dp_shard: Any = -1) -> dict[str, int]:
    """{"pp": .., "dp_replicate": .., "dp_shard": ..} for `world` ranks, a -1 replaced by the ranks left.
    ValueError naming the sizes when they are < 1 (other than one -1) or do not multiply to `world`; the
    check apps run before any rank starts."""
    given = {"pp": pp, "dp_replicate": dp_replicate, "dp_shard": dp_shard}
    shown = " x ".join(f"{k}={v}" for k, v in given.items())
    for name, value in given.items():
        check_int(value, f"pycomm.Mesh: {name}", min_value=None)
    bad = [k for k, v in given.items() if v < 1 and v != -1]
    if bad:
        raise ValueError(f"pycomm.Mesh: {bad[0]}={given[bad[0]]} must be >= 1 (or -1: the ranks left) in {shown}")
    rest = [k for k, v in given.items() if v == -1]
    if len(rest) > 1:
        raise ValueError(f"pycomm.Mesh: only one size may be -1 (the ranks left), got {' and '.join(rest)} in {shown}")
    known = math.prod(v for v in given.values() if v != -1)
    if rest:
        if world % known:
            raise ValueError(
                f"pycomm.Mesh: {shown} leaves {world}/{known} ranks for {rest[0]}: the other sizes "
                f"multiply to {known}, which does not divide the {world} ranks"
            )
        given[rest[0]] = world // known
    elif known != world:
        raise ValueError(
            f"pycomm.Mesh: {shown} = {known} ranks, but the communicator has {world}; choose sizes "
            f"whose product is {world} (one of them may be -1: the ranks left)"
        )
    return {k: int(v) for k, v in given.items()}


_NOT_AN_INT = -(2**63)  # a size that is not an int, in the ranks' exchange of their shapes


def agreed_shape(comm: Communicator, pp: Any, dp_replicate: Any, dp_shard: Any) -> dict[str, int]:
    """resolve_shape's, once every rank of `comm` asked for the same one (one all-gather of 4 numbers over
    `comm`): a rank that asked for another would leave the ranks in splits that never match, a stall at the
    first collective. Ranks whose sizes resolve alike agree (dp_shard=-1 and dp_shard=2 on 2 ranks); a
    difference is a ValueError on every rank naming each rank's shape; bad sizes given alike, resolve_shape's
    error on every rank."""
    given = (pp, dp_replicate, dp_shard)
    try:
        shape: Optional[dict[str, int]] = resolve_shape(comm.size, *given)
    except (TypeError, ValueError) as e:
        shape, error = None, e
    if comm.size == 1:
        if shape is None:
            raise error
        return shape
    sizes = (
        list(shape.values())
        if shape is not None
        else [v if isinstance(v, int) and not isinstance(v, bool) else _NOT_AN_INT for v in given]
    )
    out = torch.empty(comm.size * 4, dtype=torch.int64)
    comm.allgather(out, torch.tensor([int(shape is not None), *sizes], dtype=torch.int64))
    rows = [tuple(row) for row in out.view(comm.size, 4).tolist()]
    if len(set(rows)) > 1:
        raise ValueError(
            "pycomm.Mesh: the ranks of the communicator asked for different shapes ("
            + "; ".join(_shown(row, ranks) for row, ranks in _grouped(rows).items())
            + "); every rank must build the same Mesh at the same point"
        )
    if shape is None:
        raise error
    return shape


def _grouped(rows: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    groups: dict[tuple[int, ...], list[int]] = {}
    for rank, row in enumerate(rows):
        groups.setdefault(row, []).append(rank)
    return groups


def _shown(row: tuple[int, ...], ranks: list[int]) -> str:
    resolved, *sizes = row
    shape = " x ".join(f"{d}={'(not an int)' if v == _NOT_AN_INT else v}" for d, v in zip(DIMS, sizes))
    who = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    return f"{who}: {shape}{'' if resolved else ' (invalid)'}"


def coords_of(rank: int, shape: dict[str, int]) -> dict[str, int]:
    """The coordinates of `rank` in a mesh of `shape` (dp_shard innermost)."""
    shard, replica = shape["dp_shard"], shape["dp_replicate"]
    return {"pp": rank // (replica * shard), "dp_replicate": rank // shard % replica, "dp_shard": rank % shard}


def _rank_of(coords: dict[str, int], shape: dict[str, int]) -> int:
    return (coords["pp"] * shape["dp_replicate"] + coords["dp_replicate"]) * shape["dp_shard"] + coords["dp_shard"]


def _varying(name: str) -> tuple[str, ...]:
    return FLATTENED.get(name, (name,))


def group_ranks(name: str, shape: dict[str, int]) -> list[list[int]]:
    """Every group of dimension `name` as its ranks (in group-rank order), groups in order of their
    lowest rank."""
    if name not in NAMES:
        raise KeyError(f"pycomm.Mesh has no dimension {name!r}; dimensions: {', '.join(NAMES)}")
    world = math.prod(shape.values())
    varying = _varying(name)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in range(world):
        c = coords_of(r, shape)
        groups.setdefault(tuple(c[d] for d in DIMS if d not in varying), []).append(r)
    return sorted(groups.values())


def _node_ids(comm: Communicator) -> list[int]:
    """The node of every rank of `comm` (collective the first time per communicator): PYCOMM_RANKS_PER_NODE's
    blocks of consecutive ranks where it is set, else the ranks' host names."""
    per_node = ranks_per_node(comm.size)  # read at each call, as split_by_node does
    if per_node is not None or comm.size == 1:
        return [r // (per_node or 1) for r in range(comm.size)]
    if comm not in _NODES:
        from pycomm.peer_hosts import host_id

        out = torch.empty(comm.size, dtype=torch.int64)
        comm.allgather(out, torch.tensor([host_id()], dtype=torch.int64))
        first: dict[int, int] = {}
        _NODES[comm] = [first.setdefault(h, len(first)) for h in out.tolist()]
    return _NODES[comm]


@dataclass(frozen=True)
class Roles:
    """Where a rank stands in a job whose first `servers` ranks serve (parameter servers) and the rest
    train: `index` among the ranks of its role, `count` of them."""

    is_server: bool
    index: int
    count: int
    servers: tuple[int, ...]
    workers: tuple[int, ...]


def server_roles(rank: int, world: int, servers: int) -> Roles:
    """Ranks 0 .. servers-1 serve, the others are the workers (who share the training data)."""
    is_server = rank < servers
    return Roles(
        is_server,
        rank if is_server else rank - servers,
        servers if is_server else world - servers,
        tuple(range(min(servers, world))),
        tuple(range(servers, world)),
    )


class Mesh:
    """The layout of `comm`'s ranks as pp x dp_replicate x dp_shard (see the module's docstring).
    Collective over `comm` (None: pycomm.world())."""

    def __init__(
        self, comm: Optional[Communicator] = None, *, pp: int = 1, dp_replicate: int = 1, dp_shard: int = -1
    ) -> None:
        if comm is None:
            from pycomm.runtime import world

            comm = world()
        if not isinstance(comm, Communicator):
            raise TypeError(
                f"pycomm.Mesh: comm must be a pycomm.Communicator (or None for pycomm.world()), got "
                f"{type(comm).__name__}"
            )
        self.comm = comm
        self._shape = agreed_shape(comm, pp, dp_replicate, dp_shard)
        self._coords = coords_of(comm.rank, self._shape)
        self._nodes = _node_ids(comm)
        self._comms: dict[str, Communicator] = {}
        built: dict[frozenset[str], Communicator] = {}
        whole = frozenset(d for d in DIMS if self._shape[d] > 1)
        for name in NAMES:  # the same order on every rank: each split is collective over comm
            key = frozenset(d for d in _varying(name) if self._shape[d] > 1)
            if key not in built:
                built[key] = comm if key == whole else self._split(name)
            self._comms[name] = built[key]

    @classmethod
    def across_nodes(cls, comm: Optional[Communicator] = None, *, pp: int = 1) -> "Mesh":
        """dp_shard = the ranks of one node, dp_replicate = the nodes (x pp stages): ZeRO's hybrid sharding,
        local leaders within a node. Nodes must hold equally many ranks, placed node by node."""
        if comm is None:
            from pycomm.runtime import world

            comm = world()
        nodes = _node_ids(comm) if isinstance(comm, Communicator) else []
        counts = [nodes.count(n) for n in sorted(set(nodes))]
        if counts and len(set(counts)) > 1:
            raise ValueError(
                f"pycomm.Mesh.across_nodes: the nodes hold different numbers of ranks ({counts}); a "
                "shard group per node needs equal nodes (or set PYCOMM_RANKS_PER_NODE)"
            )
        per_node = counts[0] if counts else 1
        mesh = cls(comm, pp=pp, dp_replicate=-1, dp_shard=per_node)
        mixed = [g for g in group_ranks("dp_shard", mesh.shape) if len({nodes[r] for r in g}) > 1]
        if mixed:
            raise ValueError(
                f"pycomm.Mesh.across_nodes: ranks {mixed[0]} form one shard group but sit on different "
                "nodes: the launcher placed ranks round-robin over the nodes; place them node by node "
                "(e.g. srun --distribution=block, mpirun --map-by core) or build the Mesh yourself"
            )
        return mesh

    def _split(self, name: str) -> Communicator:
        varying = _varying(name)
        color = _rank_of({d: (0 if d in varying else self._coords[d]) for d in DIMS}, self._shape)
        sub = self.comm.split(color, self.comm.rank)
        assert sub is not None
        sub.name = f"{self.comm.name}.mesh[{name}]"
        return sub

    # -- what the parallelisms read --------------------------------------------------------------
    def __getitem__(self, name: str) -> Communicator:
        """The communicator of this rank's group along `name` (pp, dp_replicate, dp_shard, or dp)."""
        if name not in self._comms:
            raise KeyError(f"pycomm.Mesh has no dimension {name!r}; dimensions: {', '.join(NAMES)}")
        return self._comms[name]

    @property
    def shape(self) -> dict[str, int]:
        """{"pp": stages, "dp_replicate": replicas, "dp_shard": shards} (a copy)."""
        return dict(self._shape)

    @property
    def coords(self) -> dict[str, int]:
        """This rank's {"pp": stage, "dp_replicate": replica, "dp_shard": shard} (a copy)."""
        return dict(self._coords)

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def size(self) -> int:
        return self.comm.size

    def groups(self, name: str) -> list[list[int]]:
        """Every group of dimension `name` as its ranks in `comm` (e.g. mesh.groups("pp"))."""
        return group_ranks(name, self._shape)

    def ranks(self, name: str) -> list[int]:
        """The ranks (in `comm`) of this rank's group along `name`."""
        return next(g for g in self.groups(name) if self.comm.rank in g)

    def spans_nodes(self, name: str) -> bool:
        """Whether this rank's group along `name` holds ranks of more than one node."""
        return len({self._nodes[r] for r in self.ranks(name)}) > 1

    def __repr__(self) -> str:
        shape = " x ".join(f"{d}={self._shape[d]}" for d in DIMS)
        nodes = len(set(self._nodes))
        here = ", ".join(f"{d}={self._coords[d]}" for d in DIMS)
        lines = [
            f"pycomm.Mesh({shape} over {self.comm.size} rank(s) on {nodes} node(s); rank {self.comm.rank} at {here})"
        ]
        for name in NAMES:
            lines.append(f"  {name}: {self._describe(name)}")
        return "\n".join(lines)

    def _describe(self, name: str) -> str:
        groups = self.groups(name)
        same = next((d for d in reversed(FLATTENED.get(name, ())) if self.groups(d) == groups), None)
        if same is not None:
            return f"the groups of {same} (the other dimensions are 1)"
        size = len(groups[0])
        shown = " ".join(str(g) for g in groups[:_SHOWN_GROUPS]) + (" ..." if len(groups) > _SHOWN_GROUPS else "")
        text = f"{len(groups)} group(s) of {size} rank(s): {shown}"
        if size == 1:
            return text
        spanning = sum(len({self._nodes[r] for r in g}) > 1 for g in groups)
        where = (
            "each within one node"
            if spanning == 0
            else "each spans nodes"
            if spanning == len(groups)
            else f"{spanning} of {len(groups)} span nodes"
        )
        return f"{text}; {where}"


__all__ = ["Mesh", "DIMS", "NAMES", "Roles", "resolve_shape", "coords_of", "group_ranks", "server_roles"]
