"""On every rank: write one checkpoint collectively with per-rank state, read back this rank's own
state; write one where the ranks' states agree (as right after an averaging) and check each rank's
copy is a hard link to rank 0's; agree on a preemption flag set on one rank only. argv: directory."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from apps import checkpoint
from apps.checkpoint import IterState
from apps.dist import Dist


def main() -> None:
    directory = Path(sys.argv[1])
    dist = Dist.init("mpi")
    assert dist.size > 1, dist
    state = IterState(step=7, world_size=dist.size, per_rank=True)
    mine = {"w": torch.full((3,), float(dist.rank))}
    path = checkpoint.save(directory, "ckpt.step00000007", dist, state, mine, {"rank": dist.rank}, {"lr": 1})
    expected = {"model_state_dict.pt", "optim_state_dict.pt", "lr_state_dict.pt", "iter_state_dict.pt",
                "manifest.json"} | {f"{s}.rank{r}.pt" for r in range(1, dist.size)
                                    for s in ("model_state_dict", "optim_state_dict")}
    assert {p.name for p in path.iterdir()} == expected, sorted(p.name for p in path.iterdir())
    loaded_state, model, optim, _ = checkpoint.load(path, dist.rank, dist.size)
    assert loaded_state.step == 7 and torch.equal(model["w"], mine["w"]) and optim == {"rank": dist.rank}
    for stem in ("model_state_dict", "optim_state_dict"):  # different bytes on each rank: separate files
        assert (path / f"{stem}.rank1.pt").stat().st_ino != (path / f"{stem}.pt").stat().st_ino

    agreed = checkpoint.save(directory, "ckpt.step00000008", dist, IterState(step=8, world_size=dist.size,
                             per_rank=True), {"w": torch.arange(5.0)}, {"same": 1}, {"lr": 1})
    for stem in ("model_state_dict", "optim_state_dict"):
        inodes = {(agreed / checkpoint.rank_file(stem, r, [stem])).stat().st_ino for r in range(dist.size)}
        assert len(inodes) == 1, (stem, inodes)  # every rank's identical copy is one file on disk
    _, model, optim, _ = checkpoint.load(agreed, dist.rank, dist.size)
    assert torch.equal(model["w"], torch.arange(5.0)) and optim == {"same": 1}
    assert dist.any(dist.rank == dist.size - 1) and not dist.any(False)  # all ranks stop at the same step
    print(f"rank {dist.rank} ok", flush=True)


if __name__ == "__main__":
    main()
