"""pycomm.DistributedSampler: equal lengths per rank, a disjoint cover of the epoch, the same order from
the same seed (another from another epoch or seed), and a resume at a sample offset on another number of
ranks that takes exactly the samples not yet taken; usable as a DataLoader's sampler."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import pycomm
from pycomm import DistributedSampler


def _ranks(n: int, size: int, **kw) -> list[DistributedSampler]:
    return [DistributedSampler(n, num_replicas=size, rank=r, **kw) for r in range(size)]


@pytest.mark.parametrize("n, size", [(0, 1), (1, 1), (7, 1), (10, 3), (97, 4), (12, 4)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_equal_lengths_and_a_disjoint_cover_of_the_epoch(n: int, size: int, drop_last: bool) -> None:
    samplers = _ranks(n, size, seed=5, drop_last=drop_last)
    for epoch in range(2):
        for s in samplers:
            s.set_epoch(epoch)
        shards = [list(s) for s in samplers]
        assert len({len(sh) for sh in shards} | {len(s) for s in samplers}) == 1, [len(sh) for sh in shards]
        counts = Counter(i for sh in shards for i in sh)
        if drop_last:  # each sample at most once; all but fewer than `size` of them
            assert max(counts.values(), default=1) == 1 and n - len(counts) < size
        else:  # all of them; fewer than `size` repeated to fill the last round
            assert set(counts) == set(range(n)) and sum(counts.values()) - n < size
    assert all(0 <= i < n for s in samplers for i in s)


def test_the_order_is_a_function_of_seed_and_epoch() -> None:
    a, b = (DistributedSampler(50, num_replicas=2, rank=1, seed=3) for _ in range(2))
    for s in (a, b):
        s.set_epoch(4)
    assert list(a) == list(b)
    b.set_epoch(5)
    assert list(a) != list(b)
    assert list(DistributedSampler(50, num_replicas=2, rank=1, seed=4)) != list(
        DistributedSampler(50, num_replicas=2, rank=1, seed=3)
    )
    plain = DistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
    assert list(plain) == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("before, after", [(4, 2), (2, 4), (3, 5)])
def test_a_resume_at_an_offset_on_other_ranks_takes_the_rest_once(before: int, after: int) -> None:
    n, batch = 120, 3
    first = _ranks(n, before, seed=9, drop_last=True)
    for s in first:
        s.set_epoch(2)
    taken_batches = 5
    seen = Counter(i for s in first for i in list(s)[: taken_batches * batch])
    offset = first[0].offset_after(taken_batches, batch)
    assert offset == taken_batches * batch * before and first[0].state_dict(taken_batches, batch) == {
        "epoch": 2,
        "offset": offset,
    }
    resumed = _ranks(n, after, seed=9, drop_last=True)
    for s in resumed:
        s.load_state_dict({"epoch": 2, "offset": offset})
        assert len(s) == (n - offset) // after
    seen.update(i for s in resumed for i in s)
    assert max(seen.values()) == 1 and n - len(seen) < after  # nothing twice; only the last round's rest left
    whole = _ranks(n, after, seed=9, drop_last=True)
    for s in whole:
        s.set_epoch(2)
    order = whole[0].order(2).tolist()
    assert sorted(seen, key=order.index) == order[: len(seen)]  # the samples taken are the epoch's first ones


def test_a_dataloader_takes_it_and_comm_defaults_to_the_world() -> None:
    comm = pycomm.init()
    data = torch.utils.data.TensorDataset(torch.arange(10.0))
    sampler = DistributedSampler(data, seed=1)
    assert (sampler.num_replicas, sampler.rank) == (comm.size, comm.rank) == (1, 0)
    loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
    assert sorted(int(x) for (b,) in loader for x in b) == list(range(10))
    assert DistributedSampler(data, comm=comm).num_replicas == 1


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"rank must be in \[0, num_replicas=2\)"):
        DistributedSampler(10, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="go together"):
        DistributedSampler(10, num_replicas=2)
    with pytest.raises(TypeError, match="must have a length"):
        DistributedSampler(object(), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"offset must be an int in \[0, 10\]"):
        DistributedSampler(10, num_replicas=1, rank=0).set_epoch(0, offset=11)
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        DistributedSampler(10, num_replicas=1, rank=0).set_epoch(-1)
