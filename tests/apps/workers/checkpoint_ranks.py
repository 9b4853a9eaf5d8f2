"""On every rank: write one checkpoint collectively with per-rank state, read back this rank's own
state; write one where the ranks' states agree (as right after an averaging) and check each rank's
copy is a hard link to rank 0's; agree on a preemption flag set on one rank only. argv: directory."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from algorithms import traits
from algorithms.checkpointing import Placement
from apps import checkpoint
from apps.checkpoint import IterState
from apps.dist import Dist

PER_RANK = {stem: traits.PER_RANK for stem in checkpoint.STEMS}


def main() -> None:
    directory = Path(sys.argv[1])
    dist = Dist.init("mpi")
    assert dist.size > 1, dist
    at = Placement.of(None, dist.rank, dist.size)
    state = IterState(step=7, world_size=dist.size)
    mine = {"w": torch.full((3,), float(dist.rank))}
    path = checkpoint.save(directory, "ckpt.step00000007", dist, state, mine, {"rank": dist.rank}, {"lr": 1}, PER_RANK)
    expected = {
        "model_state_dict.pt",
        "optim_state_dict.pt",
        "lr_state_dict.pt",
        "iter_state_dict.pt",
        "manifest.json",
    } | {f"{s}.rank{r}.pt" for r in range(1, dist.size) for s in ("model_state_dict", "optim_state_dict")}
    assert {p.name for p in path.iterdir()} == expected, sorted(p.name for p in path.iterdir())
    loaded = checkpoint.load(path, at)
    assert loaded.state.step == 7 and torch.equal(loaded.model["w"], mine["w"]) and loaded.optim == {"rank": dist.rank}
    for stem in ("model_state_dict", "optim_state_dict"):  # different bytes on each rank: separate files
        assert (path / f"{stem}.rank1.pt").stat().st_ino != (path / f"{stem}.pt").stat().st_ino

    agreed = checkpoint.save(
        directory,
        "ckpt.step00000008",
        dist,
        IterState(step=8, world_size=dist.size),
        {"w": torch.arange(5.0)},
        {"same": 1},
        {"lr": 1},
        PER_RANK,
    )
    for stem in ("model_state_dict", "optim_state_dict"):
        names = [f"{stem}.pt"] + [f"{stem}.rank{r}.pt" for r in range(1, dist.size)]
        inodes = {(agreed / name).stat().st_ino for name in names}
        assert len(inodes) == 1, (stem, inodes)  # every rank's identical copy is one file on disk
    loaded = checkpoint.load(agreed, at)
    assert torch.equal(loaded.model["w"], torch.arange(5.0)) and loaded.optim == {"same": 1}
    assert dist.any(dist.rank == dist.size - 1) and not dist.any(False)  # all ranks stop at the same step
    print(f"rank {dist.rank} ok", flush=True)


if __name__ == "__main__":
    main()
