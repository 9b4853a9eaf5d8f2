"""Averaging apply and elastic updates (the bucket-update kernel) against torch references."""

import pytest
import torch

from pycomm import kernels
from tests.kernels.conftest import sync
from tests.kernels.test_pack import FLOATS, acc_dtype, many_tensors


def slices(bucket: torch.Tensor, ts: list[torch.Tensor]) -> list[torch.Tensor]:
    offsets, _ = kernels.bucket_offsets(ts)
    return [bucket[o : o + t.numel()].cpu().reshape(t.shape) for t, o in zip(ts, offsets)]


@pytest.mark.parametrize("tensor_dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("bucket_dtype", FLOATS)
def test_averaging_apply(device, tensor_dtype, bucket_dtype):
    ts = many_tensors(113, tensor_dtype, device, seed=1)
    n = sum(t.numel() for t in ts)
    avg = torch.randn(n).to(bucket_dtype).to(device)
    snap = torch.randn(n).to(bucket_dtype).to(device)
    before = [t.cpu().clone() for t in ts]
    kernels.averaging_apply(ts, avg, snap)
    sync(device)
    acc = acc_dtype(tensor_dtype)
    for t, x0, a, s in zip(ts, before, slices(avg, ts), slices(snap, ts)):
        assert torch.equal(t.cpu(), (x0.to(acc) + (a.to(acc) - s.to(acc))).to(tensor_dtype))


def test_averaging_apply_keeps_local_progress():
    """x moved on locally while its snapshot was averaged: the move survives the apply."""
    snap = torch.tensor([1.0, 2.0, 3.0])
    x = snap + torch.tensor([0.5, 0.0, -1.0])  # local steps after the snapshot
    avg = torch.tensor([2.0, 2.0, 2.0])
    kernels.averaging_apply([x], avg, snap)
    assert x.tolist() == [2.5, 2.0, 1.0]


@pytest.mark.parametrize("tensor_dtype", FLOATS)
@pytest.mark.parametrize("a", [0.0, 0.1, 1.0])
def test_elastic_update(device, tensor_dtype, a):
    ts = many_tensors(111, tensor_dtype, device, seed=2)
    centre = torch.randn(sum(t.numel() for t in ts), device=device)
    before = [t.cpu().clone() for t in ts]
    kernels.elastic_update(ts, centre, a)
    for t, x0, c in zip(ts, before, slices(centre, ts)):
        want = ((1 - a) * x0.double() + a * c.double()).to(tensor_dtype)
        torch.testing.assert_close(t.cpu(), want, rtol=0 if tensor_dtype == torch.float32 else 1e-2, atol=1e-6)
        if a == 1.0:
            assert torch.equal(t.cpu(), c.to(tensor_dtype))


def test_bucket_lerp_and_offsets(device):
    ts = [torch.randn(4, device=device), torch.randn(3, device=device)]
    offsets = [5, 0]
    y, z = torch.randn(9, device=device), torch.randn(9, device=device)
    before = [t.cpu().clone() for t in ts]
    kernels.bucket_lerp(ts, y, z, 0.5, offsets=offsets)
    for t, x0, o in zip(ts, before, offsets):
        n = t.numel()
        torch.testing.assert_close(t.cpu(), x0 + 0.5 * (y[o : o + n].cpu() - z[o : o + n].cpu()))


def test_over_16m_elements():
    ts = [torch.randn(1 << 24), torch.randn(5)]
    avg, snap = torch.randn((1 << 24) + 5), torch.randn((1 << 24) + 5)
    want = torch.cat(ts) + (avg - snap)
    kernels.averaging_apply(ts, avg, snap)
    assert torch.equal(torch.cat(ts), want)
