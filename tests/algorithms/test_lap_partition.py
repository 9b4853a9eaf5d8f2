"""LPP-SGD's block partition: contiguous, covering, non-empty, and optimally balanced."""

import itertools
import random

import pytest

from algorithms.lap.blocks import partition_blocks


def brute_force_bottleneck(sizes: list[int], parts: int) -> int:
    """The smallest possible largest block over every contiguous split into non-empty blocks."""
    best = None
    for cuts in itertools.combinations(range(1, len(sizes)), parts - 1):
        bounds = (0, *cuts, len(sizes))
        worst = max(sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:]))
        best = worst if best is None else min(best, worst)
    return best


def check_cover(blocks: list[tuple[int, int]], n: int, parts: int) -> None:
    assert len(blocks) == parts
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    for (a, b), (c, _) in zip(blocks, blocks[1:]):
        assert b == c
    assert all(a < b for a, b in blocks)


@pytest.mark.parametrize("trial", range(40))
def test_partition_is_contiguous_and_optimally_balanced(trial):
    rng = random.Random(trial)
    n = rng.randint(1, 9)
    parts = rng.randint(1, n)
    sizes = [rng.choice([0, 1, 7, 100, 4096, rng.randint(1, 5000)]) for _ in range(n)]
    blocks = partition_blocks(sizes, parts)
    check_cover(blocks, n, parts)
    assert max(sum(sizes[a:b]) for a, b in blocks) == brute_force_bottleneck(sizes, parts)


def test_partition_of_a_cnn_like_parameter_list():
    # conv1 w/b, conv2 w/b, fc1 w/b, fc2 w/b: the big fc1 weight gets a block of its own
    sizes = [72, 8, 1152, 16, 50176, 128, 1280, 10]
    blocks = partition_blocks(sizes, 2)
    check_cover(blocks, len(sizes), 2)
    assert blocks == [(0, 4), (4, 8)] or blocks == [(0, 5), (5, 8)]
    assert max(sum(sizes[a:b]) for a, b in blocks) == brute_force_bottleneck(sizes, 2)


def test_partition_bad_input():
    with pytest.raises(ValueError, match="parts"):
        partition_blocks([1, 2, 3], 0)
    with pytest.raises(ValueError, match="at most 3 processes"):
        partition_blocks([1, 2, 3], 4)
    with pytest.raises(ValueError, match="sizes"):
        partition_blocks([1, -2], 1)
