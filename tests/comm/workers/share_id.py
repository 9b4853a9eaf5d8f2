"""How the NCCL unique id reaches every rank, without a GPU: rank 0 shares 128 bytes through
pycomm.nccl_backend.share_from_rank0 (MPI, the TCP store, or torchrun's agent store, as the launch
environment dictates) and every rank checks it got exactly rank 0's bytes."""

from __future__ import annotations

import hashlib
import os
import sys

from pycomm import nccl_backend
from pycomm.launch_env import detect


def main() -> None:
    env = detect()
    expected = (hashlib.sha512(sys.argv[1].encode()).digest() * 2)[:128]
    got = nccl_backend.share_from_rank0(env, expected if env.rank == 0 else None, 128, key="test/share_id")
    assert got == expected, f"rank {env.rank}: got {got[:8]!r}..., expected {expected[:8]!r}..."
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "")
    print(f"rank {env.rank} of {env.size} ({env.launcher}, agent store {agent or 'no'}): ok")


if __name__ == "__main__":
    main()
