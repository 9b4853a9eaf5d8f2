"""1-bit sign compression with error feedback against the reference."""

import pytest
import torch

from pycomm import kernels
from tests.kernels import reference as ref
from tests.kernels.conftest import sync
from tests.kernels.test_quantize import DTYPES, check_decode_and_accumulate, sample

BLOCK = 256
SIZES = [0, 1, 7, 8, 9, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 77]


def check_against_reference(x, bits, scales, block, e_before=None, e_after=None):
    rbits, rscales, _ = ref.sign_compress(x.cpu(), block, residual=e_before)
    assert bits.dtype == torch.uint8 and bits.numel() == -(-x.numel() // 8)
    assert torch.equal(bits.cpu(), rbits)
    # the kernel sums |v| in its own order: equal to rounding
    torch.testing.assert_close(scales.cpu(), rscales, rtol=2e-6, atol=0)
    if e_after is not None:  # the residual is exactly v - decoded, with the kernel's scales
        v = x.cpu().reshape(-1).float() + e_before
        decoded = ref.sign_decompress(rbits, scales.cpu(), x.numel(), block)
        assert torch.equal(e_after.cpu(), v - decoded)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_compress_matches_reference(device, dtype, n):
    x = sample(n, dtype, device)
    bits, scales = kernels.sign_compress(x, block=BLOCK)
    sync(device)
    check_against_reference(x, bits, scales, BLOCK)


@pytest.mark.parametrize("block", [8, 24, 64, 1024])
def test_other_blocks_with_residual(device, block):
    n = 3 * block + 5
    x = sample(n, torch.float32, device, seed=block)
    e0 = torch.randn(n) * 0.1
    e = e0.clone().to(device)
    bits, scales = kernels.sign_compress(x, block=block, residual=e)
    check_against_reference(x, bits, scales, block, e0, e)


@pytest.mark.parametrize("out_dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_decompress_and_accumulate(device, out_dtype, n):
    x = sample(n, torch.float32, device, seed=5)
    bits, scales = kernels.sign_compress(x, block=BLOCK)
    check_decode_and_accumulate(
        lambda out: kernels.sign_decompress(bits, scales, out, block=BLOCK),
        lambda acc: kernels.sign_decompress_accumulate(bits, scales, acc, block=BLOCK),
        ref.sign_decompress(bits.cpu(), scales.cpu(), n, BLOCK),
        out_dtype,
        device,
    )


def test_padding_bits_are_zero():
    x = torch.ones(13)  # all positive: 8 bits in byte 0, 5 in byte 1, padding clear
    bits, _ = kernels.sign_compress(x, block=16)
    assert bits.tolist() == [0xFF, 0x1F]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_error_feedback_telescopes(device, dtype):
    """Over many steps nothing is lost: sum of decoded = sum of inputs + e_0 - e_T."""
    n, steps = 2 * BLOCK + 40, 50
    g = torch.Generator().manual_seed(0)
    e = torch.zeros(n, device=device)
    sent = torch.zeros(n, dtype=torch.float64)
    given = torch.zeros(n, dtype=torch.float64)
    for _ in range(steps):
        x = torch.randn(n, generator=g).to(dtype)
        bits, scales = kernels.sign_compress(x.to(device), block=BLOCK, residual=e)
        sent += kernels.sign_decompress(bits, scales, torch.empty(n, device=device), block=BLOCK).cpu().double()
        given += x.double()
    torch.testing.assert_close(sent + e.cpu().double(), given, rtol=0, atol=1e-4)
    # the residual stays bounded (error feedback does not diverge)
    assert e.abs().max() < 20


def test_over_16m_elements():
    n = (1 << 24) + 5
    x = torch.randn(n)
    bits, scales = kernels.sign_compress(x)
    rbits, rscales, _ = ref.sign_compress(x, BLOCK)
    assert torch.equal(bits, rbits)
    torch.testing.assert_close(scales, rscales, rtol=2e-6, atol=0)
