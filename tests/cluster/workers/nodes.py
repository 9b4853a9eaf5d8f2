"""On the emulated cluster (benchmarks/cluster.py), 2 nodes x 2 ranks, under any launcher: each rank finds
its node by its host name (no PYCOMM_RANKS_PER_NODE), split_by_node and pycomm.Mesh put a node in dp_shard
and the nodes in dp_replicate, and an all-reduce of --bytes over dp_replicate (which crosses the link
between the nodes) sums right. Prints "rank R/N on nodeK (BACKEND, LAUNCHER): nodes ok"; an AssertionError
names the failed check. --hold: then all-reduce over the world until killed (for losing a node)."""

from __future__ import annotations

import argparse
import os
import socket
import time

import torch

import pycomm
from pycomm import SUM
from pycomm.launch_env import detect


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=4 << 20)
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    assert "PYCOMM_RANKS_PER_NODE" not in os.environ, "the nodes must be found for real, not declared"
    world = pycomm.init()
    r, host = world.rank, socket.gethostname()
    assert world.size == 4, world.size
    assert host == f"node{r // 2}", f"rank {r} runs on {host}, expected node{r // 2} (placed node by node)"
    intra, inter = world.split_by_node()
    assert (intra.size, inter.size, intra.rank, inter.rank) == (2, 2, r % 2, r // 2), (
        r,
        intra.size,
        inter.size,
        intra.rank,
        inter.rank,
    )
    mesh = pycomm.Mesh.across_nodes(world)
    assert mesh.shape == {"pp": 1, "dp_replicate": 2, "dp_shard": 2}, mesh.shape
    assert mesh.groups("dp_shard") == [[0, 1], [2, 3]] and mesh.groups("dp_replicate") == [[0, 2], [1, 3]]
    assert not mesh.spans_nodes("dp_shard") and mesh.spans_nodes("dp_replicate"), repr(mesh)
    assert "on 2 node(s)" in repr(mesh), repr(mesh)
    explicit = pycomm.Mesh(world, dp_replicate=2, dp_shard=2)
    assert explicit.groups("dp_shard") == mesh.groups("dp_shard") and not explicit.spans_nodes("dp_shard")
    n = args.bytes // 4
    t = torch.full((n,), float(r))
    mesh["dp_replicate"].allreduce(t, op=SUM)
    expect = float(r % 2 + (r % 2 + 2))  # the two ranks with this local rank, one per node
    assert bool((t == expect).all()), f"rank {r}: all-reduce over the nodes gave {t[:4].tolist()}, expected {expect}"
    world.barrier()
    print(f"rank {r}/{world.size} on {host} ({world.backend}, {detect().launcher}): nodes ok", flush=True)
    while args.hold:
        world.allreduce(torch.ones(1024), op=SUM)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
