"""Prints, as one JSON line per process, what the kernel backed with huge pages: a buffer of pycomm's
pool, a tensor the user allocates with torch, and a broadcast through them (run alone, or as ranks
of `apps.launch.spawn`, which sets THP_MEM_ALLOC_ENABLE for them)."""

from __future__ import annotations

import json
import os

import torch

import pycomm
from pycomm import _buffers, hugepages

NUMEL = 3 << 20  # 12 MiB of float32: whole huge pages inside it wherever it lands


def main() -> None:
    pooled = _buffers.POOL.take(NUMEL, torch.float32, torch.device("cpu"))
    pooled.fill_(1.0)
    users = torch.empty(NUMEL)
    users.fill_(2.0)
    report = {
        "policy": hugepages.policy(),
        "torch_env": os.environ.get(hugepages.TORCH_ENV),
        "pool_huge_bytes": hugepages.backed_bytes(pooled),
        "user_huge_bytes": hugepages.backed_bytes(users),
        "advise_small": hugepages.advise(torch.empty(16)),
        "advise_meta": hugepages.advise(torch.empty(NUMEL, device="meta")),
    }
    if os.environ.get("OMPI_COMM_WORLD_SIZE"):
        pycomm.init()
        comm = pycomm.world()
        users.fill_(float(comm.rank + 5))
        comm.broadcast(users, root=1)  # contents on huge pages travel as on small ones
        report.update(rank=comm.rank, broadcast_ok=bool(torch.equal(users, torch.full_like(users, 6.0))))
    print("HUGEPAGES " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
