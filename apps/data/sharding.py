"""Deterministic data order for apps.train: pycomm.DistributedSampler's epoch order and dealing to the
ranks (drop_last), cut into segments (maxie's unit of progress) and batches. A position is
(epoch, segment, samples of the segment already taken over all ranks), so it means the same samples on
any number of ranks: a resumed run, on as many ranks or on others, takes exactly the samples an
uninterrupted run would take next (a segment's last samples that fill no whole step are left, as in
every segment)."""

from __future__ import annotations

from typing import Iterator

import torch

from pycomm.distributed_sampler import DistributedSampler


class ShardPlan:
    def __init__(
        self,
        num_samples: int,
        rank: int,
        size: int,
        batch_size: int,
        seed: int,
        segment_size: int | None = None,
        shuffle: bool = True,
    ):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        self.sampler = DistributedSampler(
            num_samples, num_replicas=size, rank=rank, shuffle=shuffle, seed=seed, drop_last=True
        )
        self.n, self.rank, self.size, self.batch_size = num_samples, rank, size, batch_size
        self.segment_size = min(segment_size or num_samples, num_samples)
        if self.segment_size // size < batch_size:
            raise ValueError(
                f"a segment of {self.segment_size} samples over {size} ranks gives fewer than one "
                f"batch of {batch_size} per rank: lower data.batch_size or raise data.segment_size"
            )

    @property
    def global_batch(self) -> int:
        """Samples one step takes over all ranks."""
        return self.batch_size * self.size

    @property
    def num_segments(self) -> int:
        return -(-self.n // self.segment_size)

    def bounds(self, segment: int) -> tuple[int, int]:
        """[start_idx, end_idx) of the segment, in positions of the epoch's permutation."""
        start = segment * self.segment_size
        return start, min(start + self.segment_size, self.n)

    def steps_in_segment(self, segment: int, taken: int = 0) -> int:
        """Steps left in the segment once `taken` of its samples are trained on (equal on every rank)."""
        start, end = self.bounds(segment)
        return max(end - start - taken, 0) // self.global_batch

    @property
    def steps_per_epoch(self) -> int:
        return sum(self.steps_in_segment(s) for s in range(self.num_segments))

    def progress(self, epoch: int, segment: int, taken: int) -> int:
        """The steps an uninterrupted run on this plan's ranks has taken when it reaches the position:
        where a resumed run stands in this world's steps (its schedule's position)."""
        before = sum(self.steps_in_segment(s) for s in range(segment + 1))
        return epoch * self.steps_per_epoch + before - self.steps_in_segment(segment, taken)

    def order(self, epoch: int) -> torch.Tensor:
        return self.sampler.order(epoch)

    def shard(self, epoch: int, segment: int, taken: int = 0) -> torch.Tensor:
        """This rank's samples of the segment after its first `taken` (over all ranks)."""
        start, end = self.bounds(segment)
        return self.sampler.window(epoch, min(start + taken, end), end)

    def batches(self, epoch: int, segment: int, taken: int = 0) -> Iterator[torch.Tensor]:
        shard = self.shard(epoch, segment, taken)
        for step in range(self.steps_in_segment(segment, taken)):
            yield shard[step * self.batch_size : (step + 1) * self.batch_size]
