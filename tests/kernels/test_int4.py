"""What is int4's own (test_quantize.py runs the checks both formats share, CPU and GPU): the nibble
layout, pycomm.Int4Codec's documented error bound on random and adversarial inputs (ties, outliers,
subnormal and near-overflow blocks), the fused reduce step, and argument errors."""

import numpy as np
import pytest
import torch

import pycomm
from pycomm import kernels
from tests.kernels import reference as ref

BLOCK = 128


def test_nibble_layout(device):
    """Element 2k in the low nibble of byte k, 2k + 1 in the high one, 4-bit two's complement; an odd
    tensor's last high nibble is 0."""
    x = torch.tensor([1.0, -1.0, 7.0, -7.0, 3.0], device=device)  # one block: scale 1, levels as given
    packed, scales = kernels.quantize_int4(x, block=6)
    assert packed.cpu().tolist() == [0xF1, 0x97, 0x03] and scales.cpu().tolist() == [1.0]


def _within_bound(codec: pycomm.Int4Codec, x: torch.Tensor) -> None:
    out = codec.decode(codec.encode(x), torch.empty(x.numel(), device=x.device))
    err = (out.cpu() - x.cpu().reshape(-1).float()).abs()
    bound = codec.error_bound(x).cpu()
    assert torch.isfinite(out).all()
    over = err - bound
    assert (over <= 0).all(), f"worst {float(over.max()):.3g} over the bound at element {int(over.argmax())}"


@pytest.mark.parametrize("stochastic", [False, True])
def test_error_within_bound_random(device, stochastic):
    g = torch.Generator().manual_seed(7)
    n = 40 * BLOCK + 3
    inputs = [
        torch.randn(n, generator=g),
        torch.rand(n, generator=g) * 2 - 1,
        torch.randn(n, generator=g) * torch.logspace(-20, 20, n),  # blocks of very different scale
        torch.randn(n, generator=g).exp() ** 8,
    ]  # heavy right tail
    for k, x in enumerate(inputs):
        _within_bound(pycomm.Int4Codec(block=BLOCK, stochastic=stochastic, seed=k), x.to(device))


def test_error_bound_is_half_a_level(device):
    """Ties at every half level (round half to even) sit exactly on the deterministic bound, scale / 2."""
    levels = torch.arange(-7, 7, dtype=torch.float32)
    x = torch.cat([torch.tensor([7.0, -7.0]), levels + 0.5]).repeat(4) * 0.25  # scale = 0.25 exactly
    codec = pycomm.Int4Codec(block=16)
    err = (codec.decode(codec.encode(x.to(device)), torch.empty(x.numel(), device=device)).cpu() - x).abs()
    assert err.max() == 0.125  # the worst case is reached...
    assert (err <= codec.error_bound(x)).all()  # ...and bounded
    torch.testing.assert_close(codec.error_bound(x), torch.full_like(x, 0.125), rtol=1e-4, atol=0)


def test_error_within_bound_adversarial(device):
    top = np.arange(0x7F7FFFFF - (1 << 14), 0x7F800000, dtype=np.uint32).view(np.float32)  # near float32's max
    cases = {
        "outlier": torch.cat([torch.tensor([1e6]), torch.full((BLOCK - 1,), 1e-3)]),  # the rest rounds to 0
        "just below a level boundary": torch.tensor([7.0] + [6.4999995, -6.4999995, 0.4999999, 3.5000002] * 3),
        "all equal": torch.full((3 * BLOCK,), -0.3),
        "alternating extremes": torch.tensor([3.0, -3.0] * BLOCK),
        "near float32 max": torch.from_numpy(top.copy()),
        "near float32 max, signs": torch.from_numpy(np.concatenate([top, -top[::-1]])),
        "subnormal": torch.tensor([3e-45, -1.4e-45, 0.0, 2.8e-45, 1e-40, -5e-41, 2e-41, 7e-45] * 4),
        "smallest normal": torch.full((BLOCK,), 2.0**-126) * torch.linspace(-1, 1, BLOCK),
        "zeros": torch.zeros(2 * BLOCK + 1),
    }
    for name, x in cases.items():
        for block in (2, BLOCK):
            try:
                _within_bound(pycomm.Int4Codec(block=block), x.to(device))
            except AssertionError as e:
                raise AssertionError(f"{name}, block {block}: {e}") from None
    assert (pycomm.Int4Codec().error_bound(cases["zeros"]) == 0).all()  # an all-zero block is exact


@pytest.mark.parametrize(
    "n,own_numel",
    [(0, 0), (7, 3), (BLOCK + 1, BLOCK), (5 * BLOCK + 77, 2 * BLOCK + 5), (600 * BLOCK + 13, 250 * BLOCK + 45)],
)  # > 2^16: the parallel chunks
@pytest.mark.parametrize("residuals,stochastic", [(False, False), (True, True)])
def test_fused_reduce_matches_the_kernels_in_sequence(n, own_numel, residuals, stochastic):
    g = torch.Generator().manual_seed(n)
    own = torch.randn(own_numel, generator=g)
    own_res = torch.randn(own_numel, generator=g) * 0.01 if residuals else None
    residual = torch.randn(n, generator=g) * 0.01 if residuals else None
    sources = [ref.quantize_int4(torch.randn(n, generator=g) * 10.0**s, BLOCK)[:2] for s in range(3)]
    acc = torch.zeros(n)
    acc[:own_numel] = own if own_res is None else own + own_res
    for packed, scales in sources:
        acc += ref.dequantize_int4(packed, scales, n, BLOCK)
    acc *= torch.tensor(1 / 3, dtype=torch.float32)
    want_p, want_s, want_res = ref.quantize_int4(acc, BLOCK, stochastic=stochastic, seed=5, residual=residual)

    packed, scales = torch.empty(-(-n // 2), dtype=torch.uint8), torch.empty(-(-n // BLOCK))
    decoded = torch.empty(own_numel)
    kernels.reduce_quantize_int4(
        own,
        sources,
        packed,
        scales,
        numel=n,
        block=BLOCK,
        factor=1 / 3,
        own_residual=own_res,
        residual=residual,
        stochastic=stochastic,
        seed=5,
        decoded_out=decoded,
    )
    assert torch.equal(scales, want_s) and torch.equal(packed, want_p)
    assert torch.equal(decoded, ref.dequantize_int4(want_p, want_s, n, BLOCK)[:own_numel])
    if residuals:
        assert torch.equal(residual, want_res) and torch.equal(own_res, torch.zeros(own_numel))


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="block must be a positive multiple of 2"):
        kernels.quantize_int4(torch.randn(10), block=5)
    with pytest.raises(ValueError, match="Int4Codec: block must be a positive multiple of 2"):
        pycomm.Int4Codec(block=3)
    with pytest.raises(ValueError, match="packed: expected 5 elements"):
        kernels.dequantize_int4(torch.zeros(4, dtype=torch.uint8), torch.zeros(1), torch.empty(10), block=BLOCK)
    with pytest.raises(TypeError, match="packed"):
        kernels.quantize_int4(torch.randn(10), torch.zeros(5, dtype=torch.int8))
