"""On every rank: save a checkpoint with per-rank state, flip one byte of the last rank's model file,
and resume from it through the Checkpointer. The last rank must raise a CheckpointError naming its
file, every other rank one naming the failing rank, all at once (no rank trains on into a
collective the failing one never joins). argv: directory."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from algorithms import traits
from apps import checkpoint
from apps.checkpoint import CheckpointError, IterState
from apps.config.schema import CheckpointConfig
from apps.dist import Dist
from apps.failure import PeerFailedError
from apps.loop_support import Checkpointer

PER_RANK = {stem: traits.PER_RANK for stem in checkpoint.STEMS}


def main() -> None:
    directory = Path(sys.argv[1])
    dist = Dist.init("mpi")
    last = dist.size - 1
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    state = IterState(step=4, world_size=dist.size)
    path = checkpoint.save(
        directory, "ckpt.step00000004", dist, state, model.state_dict(), opt.state_dict(), sched.state_dict(), PER_RANK
    )
    bad = path / f"model_state_dict.rank{last}.pt"
    if dist.rank == 0:
        data = bytearray(bad.read_bytes())
        data[len(data) // 2] ^= 0xFF
        bad.write_bytes(bytes(data))
    dist.barrier()
    try:
        Checkpointer(CheckpointConfig(), directory, dist, model, opt, sched).restore(str(path), batch_size=1)
    except (CheckpointError, PeerFailedError) as e:  # the failing rank's own error; the others stop too
        message, error = str(e), e
    else:
        raise AssertionError(f"rank {dist.rank}: resuming from a corrupt checkpoint succeeded")
    if dist.rank == last:
        assert f"{bad} is corrupt: its SHA-256 differs" in message, message
    else:
        assert f"rank(s) {last} could not load" in message and isinstance(error, PeerFailedError), message
    print(f"rank {dist.rank} ok", flush=True)


if __name__ == "__main__":
    main()
