"""split_by_node with PYCOMM_RANKS_PER_NODE=2 on 4 ranks: nodes {0,1} and {2,3}; the inter communicator
joins the ranks with the same local rank; a sum over each says who is in it. Then pycomm.Mesh on the same
nodes (tests/comm/workers/mesh.py), split_by_node's cache and errors, and Communicator's convention
(tests/comm/workers/api_convention.py) on the same ranks."""

from __future__ import annotations

import torch

import pycomm
from pycomm import SUM
from tests.comm.workers import api_convention, mesh


def main() -> None:
    pycomm.init()
    comm = pycomm.world()
    intra, inter = comm.split_by_node()
    assert (intra.size, inter.size) == (2, 2), (intra.size, inter.size)
    assert intra.rank == comm.rank % 2 and inter.rank == comm.rank // 2, (comm.rank, intra.rank, inter.rank)
    t = torch.tensor([float(comm.rank)])
    intra.allreduce(t, op=SUM)
    node = comm.rank // 2
    assert t.item() == 4 * node + 1, f"rank {comm.rank}: node sum {t.item()}"  # 2n + (2n + 1)
    u = torch.tensor([float(comm.rank)])
    inter.allreduce(u, op=SUM)
    assert u.item() == 2 * (comm.rank % 2) + 2, f"rank {comm.rank}: inter sum {u.item()}"  # l + (l + 2)
    mesh.check(comm)
    api_convention.check_split_by_node(comm)
    api_convention.check(comm)


if __name__ == "__main__":
    main()
