"""The cache of validated multi-tensor layouts (pycomm/kernels/_layout_cache.py): a repeated call
hits it, and any change to a tensor that the validation depends on (reallocation, resize, dtype,
strides, a different list or bucket) gets a fresh layout, never a stale one."""

import pytest
import torch

from pycomm import kernels
from pycomm.kernels._layout_cache import LayoutCache
from pycomm.kernels._segments import LAYOUTS


def elastic_reference(
    ts: list[torch.Tensor], centre: torch.Tensor, a: float, offsets: list[int] | None = None
) -> list[torch.Tensor]:
    if offsets is None:
        offsets, _ = kernels.bucket_offsets(ts)
    return [
        ((1 - a) * t.double() + a * centre[o : o + t.numel()].double().view_as(t)).float() for t, o in zip(ts, offsets)
    ]


def pull_and_check(
    ts: list[torch.Tensor], centre: torch.Tensor, a: float = 0.25, offsets: list[int] | None = None
) -> None:
    want = elastic_reference(ts, centre, a, offsets)
    kernels.elastic_update(ts, centre, a, offsets=offsets)
    for t, w in zip(ts, want):
        torch.testing.assert_close(t, w, rtol=0, atol=1e-6)


def fresh(n: int = 5) -> tuple[list[torch.Tensor], torch.Tensor]:
    ts = [torch.randn(7 + k) for k in range(n)]
    return ts, torch.randn(sum(t.numel() for t in ts) + 16)


def test_repeated_call_hits_the_cache_and_stays_correct():
    ts, centre = fresh()
    pull_and_check(ts, centre)
    hits = LAYOUTS.hits
    pull_and_check(ts, centre)
    assert LAYOUTS.hits == hits + 1
    pull_and_check([t for t in ts], centre)  # a new list object with the same tensors: same layout
    assert LAYOUTS.hits == hits + 2


def test_reallocated_tensor_gets_a_fresh_layout():
    ts, centre = fresh()
    pull_and_check(ts, centre)
    old = ts[2].data
    kept = old.clone()
    ts[2].data = torch.randn(old.numel())  # same tensor object, new storage
    misses = LAYOUTS.misses
    pull_and_check(ts, centre)
    assert LAYOUTS.misses == misses + 1
    assert torch.equal(old, kept)  # the old storage was not written


@pytest.mark.parametrize("new_numel", [3, 40])
def test_resized_tensor_gets_a_fresh_layout(new_numel):
    ts, centre = fresh()
    offsets = [0, 100, 200, 300, 400]
    centre = torch.randn(500)
    pull_and_check(ts, centre, offsets=offsets)
    old = ts[1].detach()  # shares the storage
    ts[1].resize_(new_numel)  # shrinks in place (same data pointer) or grows (reallocates)
    ts[1].normal_()
    tail = old[new_numel:].clone()
    pull_and_check(ts, centre, offsets=offsets)
    assert torch.equal(old[new_numel:], tail)  # nothing written past the new end


def test_resize_past_the_bucket_raises_after_a_cached_call():
    ts, centre = fresh()
    pull_and_check(ts, centre)
    ts[-1].resize_(centre.numel())
    with pytest.raises(ValueError, match="elastic_update: centre has"):
        kernels.elastic_update(ts, centre, 0.5)


def test_retyped_tensor_at_the_same_address_is_rejected():
    ts, centre = fresh()
    pull_and_check(ts, centre)
    ts[0].data = ts[0].data.view(torch.int32)  # same pointer and numel, another dtype
    with pytest.raises(TypeError, match=r"elastic_update: tensors\[0\]"):
        kernels.elastic_update(ts, centre, 0.5)


def test_restrided_tensor_at_the_same_address_is_rejected():
    ts = [torch.randn(3, 4), torch.randn(5)]
    centre = torch.randn(17)
    pull_and_check(ts, centre)
    ts[0].t_()  # same pointer and numel, no longer contiguous
    with pytest.raises(ValueError, match="contiguous"):
        kernels.elastic_update(ts, centre, 0.5)


def test_different_list_order_offsets_and_bucket_get_their_own_layouts():
    ts, centre = fresh()
    pull_and_check(ts, centre)
    pull_and_check(ts[::-1], centre)  # same tensors, other offsets
    pull_and_check(ts, centre, offsets=[40, 30, 20, 10, 0])
    pull_and_check(ts, torch.randn(centre.numel()))  # another bucket
    pull_and_check(ts[1:], centre)


def test_a_generator_of_tensors_is_read_once():
    ts, centre = fresh()
    want = elastic_reference(ts, centre, 0.5)
    for _ in range(2):  # uncached, then cached
        kernels.elastic_update((t for t in ts), centre, 0.5)
        for t, w in zip(ts, want):
            torch.testing.assert_close(t, w, rtol=0, atol=1e-6)
        want = elastic_reference(ts, centre, 0.5)


def test_bad_input_is_never_cached():
    ts, centre = fresh()
    for _ in range(2):
        with pytest.raises(ValueError, match="centre has"):
            kernels.elastic_update(ts, centre[:5], 0.5)
        with pytest.raises(TypeError, match=r"tensors\[1\]: expected a torch.Tensor"):
            kernels.elastic_update([ts[0], "x"], centre, 0.5)


def test_layout_cache_evicts_the_oldest_and_never_stores_failures():
    cache = LayoutCache(capacity=2)
    calls: list[str] = []

    def validate(name: str):
        def run():
            calls.append(name)
            return name

        return run

    assert [cache.get(k, validate(k)) for k in "abab"] == list("abab")
    assert calls == ["a", "b"]
    cache.get("c", validate("c"))  # evicts a
    cache.get("a", validate("a"))
    assert calls == ["a", "b", "c", "a"]
    assert cache.get(None, validate("n")) == "n" and cache.get(None, validate("n")) == "n"
    assert calls[-2:] == ["n", "n"]

    def fail():
        raise ValueError("bad")

    for _ in range(2):
        with pytest.raises(ValueError):
            cache.get("f", fail)
    assert "f" not in [cache.get(k, validate(k)) for k in "ca"]
