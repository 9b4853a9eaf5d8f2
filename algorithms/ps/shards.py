"""Which server holds which parameters when servers > 1: the parameter list is cut into `servers`
contiguous shards of whole tensors, balanced by element count and never empty (the linear-partition
split LPP-SGD uses, algorithms/lap/blocks.py). Server s owns shard s: its parameters, their optimizer
state, its own version counter and per-worker clocks, and its own checkpoint. A worker pushes each
shard's slice of its gradient to that shard's server and pulls each shard from it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms import options as opts
from algorithms.lap.blocks import partition_blocks


@dataclass(frozen=True)
class Shard:
    index: int
    tensors: tuple[int, int]  # [start, stop) in the parameter list
    elements: tuple[int, int]  # [start, stop) in the flat vector of all parameters

    def params(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        return params[self.tensors[0] : self.tensors[1]]

    def slice(self, vector: torch.Tensor) -> torch.Tensor:
        return vector[self.elements[0] : self.elements[1]]


def split(params: list[torch.Tensor], servers: int) -> list[Shard]:
    """The `servers` shards of `params` (one shard holding everything when servers == 1)."""
    if servers > len(params):
        raise opts.OptionError(
            f"servers={servers}: the model has {len(params)} parameter tensors and a shard holds "
            f"whole tensors, so at most {len(params)} servers can each hold a non-empty shard; "
            "use fewer servers"
        )
    sizes = [p.numel() for p in params]
    out, offset = [], 0
    for i, (start, stop) in enumerate(partition_blocks(sizes, servers)):
        n = sum(sizes[start:stop])
        out.append(Shard(i, (start, stop), (offset, offset + n)))
        offset += n
    return out
