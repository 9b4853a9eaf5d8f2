"""Multi-tensor pack / unpack against torch.cat / split references."""

import pytest
import torch

from pycomm import kernels
from tests.kernels.conftest import sync

FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def many_tensors(count: int, dtype: torch.dtype, device: str, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 600, (count,), generator=g).tolist()
    sizes[:4] = [0, 1, 7, 255]
    return [
        torch.randn(s, generator=g).reshape(-1, 1).to(dtype).to(device)
        if s % 2
        else torch.randn(s, generator=g).to(dtype).to(device)
        for s in sizes
    ]


@pytest.mark.parametrize("tensor_dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("bucket_dtype", FLOATS)
@pytest.mark.parametrize("scale", [1.0, 0.25, 1 / 3])
def test_pack_unpack_many_tensors(device, tensor_dtype, bucket_dtype, scale):
    ts = many_tensors(117, tensor_dtype, device)
    total = sum(t.numel() for t in ts)
    bucket = torch.full((total + 5,), -7.0, dtype=bucket_dtype, device=device)
    kernels.pack(ts, bucket, scale=scale)
    sync(device)
    acc = acc_dtype(tensor_dtype)
    want = (torch.cat([t.cpu().reshape(-1).to(acc) for t in ts]) * scale).to(bucket_dtype)
    assert torch.equal(bucket[:total].cpu(), want)
    assert (bucket[total:].cpu() == -7).all()  # nothing written past the tensors

    outs = [torch.empty_like(t) for t in ts]
    kernels.unpack(bucket, outs, scale=2.0)
    offsets, _ = kernels.bucket_offsets(ts)
    for t, o, off in zip(ts, outs, offsets):
        expect = (bucket[off : off + t.numel()].cpu().to(acc) * 2.0).to(tensor_dtype).reshape(t.shape)
        assert torch.equal(o.cpu(), expect)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.float64])
def test_plain_copy_any_dtype(device, dtype):
    ts = [torch.arange(n, device=device).to(dtype) for n in (0, 1, 7, 300)]
    offsets = [3, 3, 10, 20]
    bucket = torch.zeros(400, dtype=dtype, device=device)
    kernels.pack(ts, bucket, offsets=offsets)
    for t, off in zip(ts, offsets):
        assert torch.equal(bucket[off : off + t.numel()], t)
    outs = [torch.zeros_like(t) for t in ts]
    kernels.unpack(bucket, outs, offsets=offsets)
    assert all(torch.equal(a, b) for a, b in zip(outs, ts))


def test_bucket_offsets_alignment():
    ts = [torch.empty(5), torch.empty(0), torch.empty(9)]
    assert kernels.bucket_offsets(ts, align=4) == ([0, 8, 8], 20)


def test_over_16m_elements():
    ts = [torch.randn((1 << 23) + 1), torch.randn(1 << 23), torch.randn(3)]
    bucket = torch.empty(sum(t.numel() for t in ts), dtype=torch.bfloat16)
    kernels.pack(ts, bucket, scale=0.5)
    assert torch.equal(bucket, (torch.cat(ts) * 0.5).to(torch.bfloat16))
