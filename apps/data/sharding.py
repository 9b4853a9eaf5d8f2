"""Deterministic data order: per epoch a seeded permutation, cut into segments (the training stub's
unit of progress), each segment dealt round-robin to the ranks (disjoint, together complete), then
batched. The position (epoch, segment, step in segment) fully determines what comes next, so a
resumed run sees exactly the batches an uninterrupted one would."""
from __future__ import annotations

from typing import Iterator

import torch


class ShardPlan:
    def __init__(self, num_samples: int, rank: int, size: int, batch_size: int, seed: int,
                 segment_size: int | None = None, shuffle: bool = True):
        if not 0 <= rank < size:
            raise ValueError(f"rank must be in [0, {size}), got {rank}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        self.n, self.rank, self.size, self.batch_size, self.seed, self.shuffle = \
            num_samples, rank, size, batch_size, seed, shuffle
        self.segment_size = min(segment_size or num_samples, num_samples)
        if self.segment_size // size < batch_size:
            raise ValueError(f"a segment of {self.segment_size} samples over {size} ranks gives fewer than one "
                             f"batch of {batch_size} per rank: lower data.batch_size or raise data.segment_size")

    @property
    def num_segments(self) -> int:
        return -(-self.n // self.segment_size)

    def bounds(self, segment: int) -> tuple[int, int]:
        """[start_idx, end_idx) of the segment, in positions of the epoch's permutation."""
        start = segment * self.segment_size
        return start, min(start + self.segment_size, self.n)

    def steps_in_segment(self, segment: int) -> int:
        start, end = self.bounds(segment)
        return (end - start) // self.size // self.batch_size  # equal on every rank: no rank waits alone

    @property
    def steps_per_epoch(self) -> int:
        return sum(self.steps_in_segment(s) for s in range(self.num_segments))

    def order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        # modulo the generator's seed range (any train.seed up to 2**64 - 1); the identity for the usual seeds
        seed = (self.seed * 1_000_003 + epoch) % 2 ** 64
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(seed))

    def shard(self, epoch: int, segment: int) -> torch.Tensor:
        start, end = self.bounds(segment)
        return self.order(epoch)[start:end][self.rank::self.size]

    def batches(self, epoch: int, segment: int, skip: int = 0) -> Iterator[torch.Tensor]:
        shard = self.shard(epoch, segment)
        for step in range(skip, self.steps_in_segment(segment)):
            yield shard[step * self.batch_size:(step + 1) * self.batch_size]
