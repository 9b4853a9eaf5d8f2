"""Blockwise absmax quantize / dequantize / dequantize-accumulate against the reference, for both
formats: int8 (a level per byte) and int4 (two per byte; tests/kernels/test_int4.py has its own
layout and error-bound checks)."""

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from pycomm import kernels
from tests.kernels import reference as ref
from tests.kernels.conftest import sync

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
BLOCK = 256
SIZES = [0, 1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 77]


@dataclass(frozen=True)
class Format:
    name: str
    quantize: Callable
    dequantize: Callable
    accumulate: Callable
    reference: Callable  # (x, block, stochastic, seed, residual) -> (q, scales, residual)
    reference_decode: Callable  # (q, scales, n, block) -> fp32
    max_level: int
    blocks: tuple[int, ...]  # valid block sizes to try besides BLOCK

    def decode(self, q: torch.Tensor, scales: torch.Tensor, n: int, block: int = BLOCK) -> torch.Tensor:
        return self.dequantize(q, scales, torch.empty(n, device=q.device), block=block)


FORMATS = [
    Format(
        "int8",
        kernels.quantize_int8,
        kernels.dequantize_int8,
        kernels.dequantize_int8_accumulate,
        ref.quantize_int8,
        lambda q, s, n, block: ref.dequantize_int8(q, s, block),
        127,
        (1, 8, 100, 1000),
    ),
    Format(
        "int4",
        kernels.quantize_int4,
        kernels.dequantize_int4,
        kernels.dequantize_int4_accumulate,
        ref.quantize_int4,
        ref.dequantize_int4,
        7,
        (2, 8, 100, 1000),
    ),
]


@pytest.fixture(params=FORMATS, ids=[f.name for f in FORMATS])
def fmt(request) -> Format:
    return request.param


def sample(n: int, dtype: torch.dtype, device: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.logspace(-3, 3, n if n else 1)[:n]  # blocks of very different scale
    if n > 300:
        x[BLOCK : 2 * BLOCK] = 0  # an all-zero block: scale 0, no NaN
    return x.to(dtype).to(device)


def check_decode_and_accumulate(
    decode: Callable[[torch.Tensor], torch.Tensor],
    accumulate: Callable[[torch.Tensor], torch.Tensor],
    expect: torch.Tensor,
    out_dtype: torch.dtype,
    device: str,
) -> None:
    """decode(out) writes `expect` (a reference decode, fp32) into an `out` of out_dtype; accumulate(acc)
    adds it to acc in fp32 (fp64 for an fp64 acc) and rounds once to out_dtype."""
    n = expect.numel()
    out = decode(torch.empty(n, dtype=out_dtype, device=device))
    assert torch.equal(out.cpu(), expect.to(out_dtype))
    acc0 = torch.randn(n).to(out_dtype)
    acc = accumulate(acc0.clone().to(device))
    want = acc0 + expect.double() if out_dtype == torch.float64 else (acc0.float() + expect).to(out_dtype)
    assert torch.equal(acc.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("stochastic", [False, True])
def test_quantize_matches_reference(device, fmt, dtype, n, stochastic):
    x = sample(n, dtype, device)
    q, scales = fmt.quantize(x, block=BLOCK, stochastic=stochastic, seed=1234)
    sync(device)
    rq, rs, _ = fmt.reference(x.cpu(), BLOCK, stochastic=stochastic, seed=1234)
    assert q.dtype == rq.dtype and scales.dtype == torch.float32
    assert scales.numel() == -(-n // BLOCK)
    torch.testing.assert_close(scales.cpu(), rs, rtol=0, atol=0)
    torch.testing.assert_close(q.cpu(), rq, rtol=0, atol=0)
    assert not torch.isnan(scales).any()


def test_quantize_other_blocks(device, fmt):
    for block in fmt.blocks:
        x = sample(3 * block + 5, torch.float32, device, seed=block)
        q, scales = fmt.quantize(x, block=block)
        rq, rs, _ = fmt.reference(x.cpu(), block)
        assert torch.equal(q.cpu(), rq) and torch.equal(scales.cpu(), rs), block
        want = fmt.reference_decode(rq, rs, x.numel(), block)
        assert torch.equal(fmt.decode(q, scales, x.numel(), block).cpu(), want)


@pytest.mark.parametrize("out_dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_dequantize_and_accumulate(device, fmt, out_dtype, n):
    x = sample(n, torch.float32, device, seed=3)
    q, scales = fmt.quantize(x, block=BLOCK)
    check_decode_and_accumulate(
        lambda out: fmt.dequantize(q, scales, out, block=BLOCK),
        lambda acc: fmt.accumulate(q, scales, acc, block=BLOCK),
        fmt.reference_decode(q.cpu(), scales.cpu(), n, BLOCK),
        out_dtype,
        device,
    )


def test_residual_carries_what_was_lost(device, fmt):
    n = 3 * BLOCK + 9
    x = sample(n, torch.bfloat16, device)
    e0 = (torch.randn(n) * 0.01).to(device)
    e = e0.clone()
    q, scales = fmt.quantize(x, block=BLOCK, residual=e)
    rq, rs, re = fmt.reference(x.cpu(), BLOCK, residual=e0.cpu())
    assert torch.equal(q.cpu(), rq) and torch.equal(scales.cpu(), rs)
    assert torch.equal(e.cpu(), re)
    # exactly: (x + e0) = decoded + e_new, up to the single rounding of the subtraction
    v = x.cpu().float() + e0.cpu()
    torch.testing.assert_close(fmt.reference_decode(rq, rs, n, BLOCK) + e.cpu(), v, rtol=1e-6, atol=0)


def test_over_16m_elements():
    fmt = FORMATS[0]  # int8 (int4's index arithmetic past 2^16 is test_int4.py's fused-reduce case)
    n = (1 << 24) + 3
    x = torch.randn(n)
    q, scales = fmt.quantize(x, block=BLOCK)
    rq, rs, _ = fmt.reference(x, BLOCK)
    assert torch.equal(scales, rs) and torch.equal(q, rq)
    acc = torch.zeros(n)
    fmt.accumulate(q, scales, acc, block=BLOCK)
    assert torch.equal(acc, fmt.reference_decode(rq, rs, n, BLOCK))


def test_stochastic_rounding_is_unbiased(fmt):
    # 1000 values at every fractional position between two levels; 4000 draws each.
    n, draws, block = 1000, 4000, 1000
    x = torch.linspace(-1.0, 1.0, n)
    x[0] = -1.0  # scale = 1 / max_level exactly from max|x|
    scale = x.abs().max() / fmt.max_level
    total = torch.zeros(n, dtype=torch.float64)
    for s in range(draws):
        q, scales = fmt.quantize(x, block=block, stochastic=True, seed=s)
        total += fmt.decode(q, scales, n, block).double()
    mean = total / draws
    err = (mean - x.double()) / scale.item()  # in units of one level
    # each draw's error is within one level with std <= 1/2, so the mean's std <= 1/(2 sqrt(draws))
    sigma = 0.5 / draws**0.5
    assert err.abs().max() < 6 * sigma, err.abs().max()
    assert abs(err.mean()) < 6 * sigma / n**0.5 * 2
    # deterministic rounding of the same values is biased by up to half a level
    qd, sd = fmt.quantize(x, block=block)
    det = (fmt.decode(qd, sd, n, block) - x) / scale
    assert det.abs().max() > 0.4


def test_stochastic_is_reproducible_and_seeded(fmt):
    x = torch.randn(5000)
    a = fmt.quantize(x, stochastic=True, seed=7)[0]
    b = fmt.quantize(x, stochastic=True, seed=7)[0]
    c = fmt.quantize(x, stochastic=True, seed=8)[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_index_above_2_32_uses_the_documented_stream():
    # The random numbers depend on the element index through both its halves.
    idx = torch.tensor([0, 1, (1 << 32) - 1, 1 << 32, (1 << 32) + 1]).numpy()
    u = ref.uniform(5, idx)
    assert ((u >= 0) & (u < 1)).all() and len(set(u.tolist())) == 5


def test_nonfinite_block_decodes_to_nan(device, fmt):
    x = torch.randn(3 * BLOCK)
    x[BLOCK + 5] = float("nan")
    x[2 * BLOCK + 1] = float("inf")
    q, scales = fmt.quantize(x.to(device), block=BLOCK)
    out = fmt.decode(q, scales, x.numel()).cpu()
    assert torch.isfinite(out[:BLOCK]).all()
    assert torch.isnan(out[BLOCK:]).all()  # never a silently wrong finite value


def test_gpu_matches_cpu_bytes(device, fmt):
    if device == "cpu":
        pytest.skip("compares a GPU run with the CPU")
    x = sample(10 * BLOCK + 3, torch.float16, "cpu")
    e = torch.randn(x.numel()) * 0.01
    for stochastic in (False, True):
        ec, eg = e.clone(), e.to(device)
        qc, sc = fmt.quantize(x, block=BLOCK, stochastic=stochastic, seed=99, residual=ec)
        qg, sg = fmt.quantize(x.to(device), block=BLOCK, stochastic=stochastic, seed=99, residual=eg)
        assert torch.equal(qc, qg.cpu()) and torch.equal(sc, sg.cpu()) and torch.equal(ec, eg.cpu())
