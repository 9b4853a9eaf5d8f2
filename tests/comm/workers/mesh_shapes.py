"""pycomm.Mesh built with different shapes on different ranks of 3 real ranks: every rank gets the same
ValueError naming each rank's shape (no stall), the communicator stays usable, and sizes that resolve
alike (dp_shard=-1 and dp_shard=3) agree. Prints MARK lines tests/comm/test_mesh.py checks."""

from __future__ import annotations

import sys

import torch

import pycomm


def attempt(world: pycomm.Communicator, case: str, **sizes: int) -> None:
    try:
        mesh = pycomm.Mesh(world, **sizes)
    except ValueError as e:
        print(f"MARK rank {world.rank} {case}: {e}", flush=True)
    else:
        print(f"MARK rank {world.rank} {case} accepted {mesh.shape}", flush=True)


def main(world: pycomm.Communicator) -> None:
    last = world.rank == world.size - 1
    attempt(world, "pp", **({"pp": 3} if last else {}))
    attempt(world, "invalid", **({"pp": 2} if last else {}))
    attempt(world, "alike", **({"dp_shard": 3} if last else {}))
    t = torch.ones(1)
    world.allreduce(t, op=pycomm.SUM)  # the communicator went on: nothing was left half-matched
    print(f"MARK rank {world.rank} sum {int(t.item())}", flush=True)


if __name__ == "__main__":
    main(pycomm.init(backend=sys.argv[1]))
