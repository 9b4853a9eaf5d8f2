"""LPP-SGD's split of the parameter list into P contiguous blocks balanced by element count.

Block k is the index range [start_k, stop_k) of the model's parameter list; worker k back-propagates
only into its block on partitioned steps. "Balanced" means the largest block (in elements) is as small
as any contiguous split into P non-empty blocks allows (the linear-partition optimum)."""

from __future__ import annotations

from typing import Sequence


def _greedy_blocks(sizes: Sequence[int], cap: int) -> list[tuple[int, int]]:
    """Fewest contiguous blocks with sum <= cap (each size <= cap), packing left to right."""
    blocks: list[tuple[int, int]] = []
    start, load = 0, 0
    for i, n in enumerate(sizes):
        if load + n > cap and i > start:
            blocks.append((start, i))
            start, load = i, 0
        load += n
    blocks.append((start, len(sizes)))
    return blocks


def _split_to(blocks: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """Split multi-tensor blocks (never increasing any block's sum) until there are `count` blocks."""
    blocks = list(blocks)
    while len(blocks) < count:
        k = max(range(len(blocks)), key=lambda j: blocks[j][1] - blocks[j][0])
        start, stop = blocks[k]
        blocks[k : k + 1] = [(start, stop - 1), (stop - 1, stop)]
    return blocks


def partition_blocks(sizes: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """Split tensors with element counts `sizes` into `parts` contiguous, non-empty [start, stop) blocks
    minimising the largest block's element count."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"parts: expected an integer >= 1, got {parts!r}")
    if len(sizes) < parts:
        raise ValueError(
            f"parts: cannot split {len(sizes)} parameter tensors into {parts} non-empty blocks; "
            f"use at most {len(sizes)} processes"
        )
    if any(n < 0 for n in sizes):
        raise ValueError(f"sizes: element counts must be >= 0, got {list(sizes)}")
    lo, hi = max(sizes), sum(sizes)
    while lo < hi:  # smallest cap for which greedy packing needs at most `parts` blocks
        mid = (lo + hi) // 2
        if len(_greedy_blocks(sizes, mid)) <= parts:
            hi = mid
        else:
            lo = mid + 1
    return _split_to(_greedy_blocks(sizes, lo), parts)
