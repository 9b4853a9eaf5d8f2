"""Which rank writes which file of a checkpoint, and which files a rank of another run reads: the one
place that turns a state's layout (algorithms/traits.py) and the parallel layout (a pycomm.Mesh's
coords and shape, or a plain data-parallel world) into file names, and refuses what cannot be
re-laid-out.

Files: `<stem>[.pp<i>][.rank<d>].pt`. `.pp<i>` names pipeline stage i (only when there are several);
`.rank<d>` the rank's place d in the stage's data-parallel group (dp_replicate x dp_shard flattened,
dp_shard innermost), only for d > 0, so a one-stage run's files keep the names of maxie's training
script (`model_state_dict.pt`, `optim_state_dict.rank1.pt`).
- ONCE: one copy for the whole job (the iteration and schedule state), written by global rank 0.
- IDENTICAL: one copy per stage (every data-parallel rank holds the same), written by d = 0; read by
  every rank of that stage, on any number of data-parallel ranks.
- PER_RANK: every rank's own, written by every rank; read back by the rank at the same place, so only
  on as many data-parallel ranks as wrote it (refused otherwise, naming both counts).
- SHARDED: one shard per dp_shard index, written by the ranks of the first replica (dp_replicate 0;
  d = the shard index); read whole (every shard of the stage) by every rank, which keeps its part: any
  dp_replicate x dp_shard. The shards carry their own index, so a writer that listed each shard once per
  replica (a plain world with replicas inside) is read the same way.
A change of the number of pipeline stages is refused for every state that is per stage: the stages'
states are cut at the saved stage boundaries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from algorithms.traits import IDENTICAL, PER_RANK, SHARDED

ONCE = "once"
KINDS = (ONCE, IDENTICAL, PER_RANK, SHARDED)
DIMS = ("pp", "dp_replicate", "dp_shard")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read as asked (incomplete, corrupt, another layout).
    `damaged`: the file found damaged (not as its manifest says, or holding what a checkpoint may not),
    when the error is about one: other checkpoints holding the same copy (hard links) are damaged too."""

    def __init__(self, message: str, damaged: Path | None = None) -> None:
        super().__init__(message)
        self.damaged = damaged


@dataclass(frozen=True)
class Placement:
    """Where a rank sits: the sizes of the parallel dimensions and its coordinates in them."""

    shape: Mapping[str, int]
    coords: Mapping[str, int]

    @classmethod
    def of(cls, mesh: Any, rank: int, size: int) -> "Placement":
        """From a pycomm.Mesh (anything with .shape and .coords over pp, dp_replicate, dp_shard; missing
        dimensions have size 1), or None: `size` data-parallel ranks, this one at `rank`."""
        if mesh is None:
            return cls({"pp": 1, "dp_replicate": 1, "dp_shard": size}, {"pp": 0, "dp_replicate": 0, "dp_shard": rank})
        shape, coords = dict(mesh.shape), dict(mesh.coords)
        return cls({d: int(shape.get(d, 1)) for d in DIMS}, {d: int(coords.get(d, 0)) for d in DIMS})

    @classmethod
    def saved(cls, shape: Mapping[str, int]) -> "Placement":
        """A writer's layout, read back from a manifest (the coordinates do not matter there)."""
        return cls({d: int(shape.get(d, 1)) for d in DIMS}, {d: 0 for d in DIMS})

    @property
    def stage(self) -> int:
        return self.coords["pp"]

    @property
    def dp_size(self) -> int:
        return self.shape["dp_replicate"] * self.shape["dp_shard"]

    @property
    def dp_index(self) -> int:
        return self.coords["dp_replicate"] * self.shape["dp_shard"] + self.coords["dp_shard"]

    def describe(self) -> str:
        dp = f"{self.dp_size} data-parallel rank(s)"
        if self.shape["dp_replicate"] > 1:
            dp += f" (dp_replicate {self.shape['dp_replicate']} x dp_shard {self.shape['dp_shard']})"
        return dp if self.shape["pp"] == 1 else f"pp={self.shape['pp']} stages x {dp}"


def file_name(stem: str, stage: int, stages: int, index: int) -> str:
    return f"{stem}{f'.pp{stage}' if stages > 1 else ''}{f'.rank{index}' if index > 0 else ''}.pt"


def written_by(stem: str, kind: str, at: Placement, global_rank: int) -> str | None:
    """The file this rank writes for `stem`, None when another rank writes it."""
    stages = at.shape["pp"]
    if kind == ONCE:
        return file_name(stem, 0, 1, 0) if global_rank == 0 else None
    if kind == IDENTICAL:
        return file_name(stem, at.stage, stages, 0) if at.dp_index == 0 else None
    if kind == PER_RANK:
        return file_name(stem, at.stage, stages, at.dp_index)
    if kind == SHARDED:
        return file_name(stem, at.stage, stages, at.coords["dp_shard"]) if at.coords["dp_replicate"] == 0 else None
    raise ValueError(f"checkpoint state {stem!r}: layout must be one of {', '.join(KINDS)}, got {kind!r}")


def to_read(stem: str, kind: str, saved: Placement, at: Placement, where: str, resized_ok: bool = False) -> list[str]:
    """The files this rank reads for `stem`, saved as `kind` by a run laid out as `saved`: one file, or
    for SHARDED every shard of the stage. `resized_ok`: a PER_RANK state whose copies differ only in
    what the loader drops on another data-parallel size (error-feedback residuals) is read from d = 0
    there."""
    if kind == ONCE:
        return [file_name(stem, 0, 1, 0)]
    if saved.shape["pp"] != at.shape["pp"]:
        raise CheckpointError(
            f"{where} was written with pp={saved.shape['pp']} pipeline stage(s); this run has "
            f"pp={at.shape['pp']}: the stages' states are cut at the saved stage boundaries, so "
            f"resume with pp={saved.shape['pp']} (the data-parallel sizes may change)"
        )
    stages, stage = at.shape["pp"], at.stage
    if kind == IDENTICAL:
        return [file_name(stem, stage, stages, 0)]
    if kind == SHARDED:
        return [file_name(stem, stage, stages, k) for k in range(saved.shape["dp_shard"])]
    if kind != PER_RANK:
        raise CheckpointError(
            f"{where}: state {stem!r} has an unknown layout {kind!r}; expected one of {', '.join(KINDS)}"
        )
    if saved.dp_size == at.dp_size:
        return [file_name(stem, stage, stages, at.dp_index)]
    if resized_ok:
        return [file_name(stem, stage, stages, 0)]
    raise CheckpointError(
        f"{where} holds {stem} per rank (each rank's differs) for {saved.describe()}; this run "
        f"has {at.describe()}: per-rank state can be neither split nor merged, so resume with "
        f"{saved.dp_size} data-parallel rank(s)"
    )
