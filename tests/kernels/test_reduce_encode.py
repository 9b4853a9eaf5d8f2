"""The fused reduce step of the quantized all-reduce (reduce_quantize_int8, reduce_sign_compress; CPU)
against the reference: the encoding of v = (own (+ own residual) + the decoded sources) * factor, bit
for bit; odd sizes, short own chunks, block edges and the parallel path (> 2^16 elements)."""

import pytest
import torch

from pycomm import kernels
from tests.kernels import reference as ref

BLOCK = 256


def encodings(n: int, sources: int, block: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in range(sources):
        x = torch.randn(n, generator=g) * 10.0 ** (s - 1)
        q, scales, _ = ref.quantize_int8(x, block)
        out.append((q, scales))
    return out


def expected(own, own_residual, sources, n, block, factor, residual, stochastic, seed):
    acc = torch.zeros(n)
    m = own.numel()
    acc[:m] = own if own_residual is None else own + own_residual
    for q, scales in sources:
        acc += ref.dequantize_int8(q, scales, block)
    if factor != 1.0:
        acc *= torch.tensor(factor, dtype=torch.float32)
    q, scales, new_residual = ref.quantize_int8(acc, block, stochastic=stochastic, seed=seed, residual=residual)
    return q, scales, new_residual


CASES = [  # (n, own_numel)
    (0, 0),
    (1, 1),
    (7, 3),
    (BLOCK - 1, BLOCK - 1),
    (BLOCK, 0),
    (BLOCK + 1, BLOCK),
    (5 * BLOCK + 77, 2 * BLOCK + 5),
    (5 * BLOCK, 5 * BLOCK),
    (300 * BLOCK + 13, 123 * BLOCK + 45),  # > 2^16 elements: the parallel chunks
]


@pytest.mark.parametrize("n,own_numel", CASES)
@pytest.mark.parametrize("sources", [0, 1, 3])
@pytest.mark.parametrize("factor", [1.0, 0.5, 1 / 3])
@pytest.mark.parametrize("residuals,stochastic", [(False, False), (True, False), (True, True)])
def test_matches_reference(n, own_numel, sources, factor, residuals, stochastic):
    g = torch.Generator().manual_seed(n + sources)
    own = torch.randn(own_numel, generator=g)
    own_res = torch.randn(own_numel, generator=g) * 0.01 if residuals else None
    residual = torch.randn(n, generator=g) * 0.01 if residuals else None
    srcs = encodings(n, sources, BLOCK, seed=n)
    q_e, s_e, res_e = expected(own, own_res, srcs, n, BLOCK, factor, residual, stochastic, 99)

    q, scales = torch.empty(n, dtype=torch.int8), torch.empty(-(-n // BLOCK))
    kernels.reduce_quantize_int8(
        own,
        srcs,
        q,
        scales,
        block=BLOCK,
        factor=factor,
        own_residual=own_res,
        residual=residual,
        stochastic=stochastic,
        seed=99,
    )
    assert torch.equal(scales, s_e)
    assert torch.equal(q, q_e)
    if residuals:
        assert torch.equal(residual, res_e)
        assert torch.equal(own_res, torch.zeros(own_numel))  # spent: my own chunk loses nothing


@pytest.mark.parametrize("block", [1, 8, 100, 1000])
def test_other_blocks(block):
    n = 3 * block + 5
    own = torch.randn(2 * block + 1)
    srcs = encodings(n, 2, block, seed=block)
    q_e, s_e, _ = expected(own, None, srcs, n, block, 0.25, None, False, 0)
    q, scales = torch.empty(n, dtype=torch.int8), torch.empty(-(-n // block))
    kernels.reduce_quantize_int8(own, srcs, q, scales, block=block, factor=0.25)
    assert torch.equal(q, q_e) and torch.equal(scales, s_e)


def test_nonfinite_block_decodes_to_nan():
    n = 3 * BLOCK
    own = torch.randn(n)
    own[BLOCK + 7] = float("inf")
    q, scales = torch.empty(n, dtype=torch.int8), torch.empty(3)
    kernels.reduce_quantize_int8(own, [], q, scales, block=BLOCK)
    assert torch.isnan(scales[1]) and not torch.isnan(scales[[0, 2]]).any()
    assert torch.isnan(kernels.dequantize_int8(q, scales, torch.empty(n), block=BLOCK)[BLOCK : 2 * BLOCK]).all()


def test_same_as_the_kernels_one_after_another():
    """What quantized.py did before the fused kernel: copy, add, accumulate each source, scale, encode."""
    n, m = 4 * BLOCK + 3, 3 * BLOCK
    own, own_res, residual = torch.randn(m), torch.randn(m) * 0.1, torch.randn(n) * 0.1
    srcs = encodings(n, 3, BLOCK, seed=5)
    acc = torch.zeros(n)
    acc[:m].copy_(own)
    acc[:m].add_(own_res)
    for q_s, s_s in srcs:
        kernels.dequantize_int8_accumulate(q_s, s_s, acc, block=BLOCK)
    acc.mul_(1.0 / 3)
    res_composed = residual.clone()
    q_c, s_c = kernels.quantize_int8(acc, block=BLOCK, residual=res_composed, stochastic=True, seed=7)
    q, scales = torch.empty(n, dtype=torch.int8), torch.empty(5)
    kernels.reduce_quantize_int8(
        own,
        srcs,
        q,
        scales,
        block=BLOCK,
        factor=1.0 / 3,
        own_residual=own_res.clone(),
        residual=residual,
        stochastic=True,
        seed=7,
    )
    assert torch.equal(q, q_c) and torch.equal(scales, s_c)
    assert torch.equal(residual, res_composed)


def _args(n=2 * BLOCK, **over):
    a = {
        "own": torch.randn(n),
        "sources": encodings(n, 1, BLOCK, 0),
        "q": torch.empty(n, dtype=torch.int8),
        "scales": torch.empty(2),
    }
    a.update(over)
    return a


@pytest.mark.parametrize(
    "over,error,words",
    [
        ({"own": torch.randn(2 * BLOCK + 1)}, ValueError, "own has 513 elements, more than the 512"),
        ({"own": torch.randn(BLOCK).half()}, TypeError, "own"),
        ({"q": torch.empty(2 * BLOCK)}, TypeError, "q: dtype"),
        ({"scales": torch.empty(3)}, ValueError, "scales"),
        ({"sources": [(torch.empty(5, dtype=torch.int8), torch.empty(2))]}, ValueError, "sources[0] data"),
        ({"sources": [(torch.empty(2 * BLOCK, dtype=torch.int8),)]}, TypeError, "sources[0]"),
        ({"sources": "x"}, TypeError, "sources"),
    ],
)
def test_bad_input(over, error, words):
    a = _args(**over)
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        kernels.reduce_quantize_int8(a["own"], a["sources"], a["q"], a["scales"], block=BLOCK)


def test_bad_keywords():
    a = _args()
    for kw, error, words in [
        ({"factor": "half"}, TypeError, "factor"),
        ({"block": 0}, ValueError, "block"),
        ({"own_residual": torch.zeros(3)}, ValueError, "own_residual"),
        ({"residual": torch.zeros(3)}, ValueError, "residual"),
        ({"seed": -1}, ValueError, "seed"),
    ]:
        with pytest.raises(error, match=words):
            kernels.reduce_quantize_int8(a["own"], a["sources"], a["q"], a["scales"], **kw)


# ---- 1-bit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,own_numel", CASES + [(9, 9)])
@pytest.mark.parametrize("sources", [0, 1, 3])
@pytest.mark.parametrize("factor", [1.0, 1 / 3])
@pytest.mark.parametrize("residuals", [False, True])
def test_sign_matches_reference(n, own_numel, sources, factor, residuals):
    g = torch.Generator().manual_seed(n + 7 * sources)
    own = torch.randn(own_numel, generator=g)
    own_res = torch.randn(own_numel, generator=g) * 0.1 if residuals else None
    residual = torch.randn(n, generator=g) * 0.1 if residuals else None
    srcs = [ref.sign_compress(torch.randn(n, generator=g) * 10.0**s, BLOCK)[:2] for s in range(sources)]
    v = torch.zeros(n)
    v[:own_numel] = own if own_res is None else own + own_res
    for bits_s, scales_s in srcs:
        v += ref.sign_decompress(bits_s, scales_s, n, BLOCK)
    if factor != 1.0:
        v *= torch.tensor(factor, dtype=torch.float32)
    bits_e, scales_e, _ = ref.sign_compress(v, BLOCK, residual=residual)
    encoded = v if residual is None else v + residual

    bits, scales = torch.empty(-(-n // 8), dtype=torch.uint8), torch.empty(-(-n // BLOCK))
    kernels.reduce_sign_compress(
        own, srcs, bits, scales, numel=n, block=BLOCK, factor=factor, own_residual=own_res, residual=residual
    )
    assert torch.equal(bits, bits_e)
    # the kernel sums a block's |v| in a fixed order of 16 partial sums, the reference in torch's: scales
    # agree to the rounding of a 256-term fp32 sum (~block * 2^-24), and the residual is exact given the
    # kernel's scales (bit-exactness against the kernel's own composition: the test below)
    torch.testing.assert_close(scales, scales_e, rtol=BLOCK * 2.0**-24, atol=0)
    if residuals:
        assert torch.equal(residual, encoded - ref.sign_decompress(bits, scales, n, BLOCK))
        assert torch.equal(own_res, torch.zeros(own_numel))


def test_sign_same_as_the_kernels_one_after_another():
    n, m = 4 * BLOCK + 24, 3 * BLOCK + 8
    own, own_res, residual = torch.randn(m), torch.randn(m) * 0.1, torch.randn(n) * 0.1
    srcs = [kernels.sign_compress(torch.randn(n), block=BLOCK) for _ in range(2)]
    acc = torch.zeros(n)
    acc[:m].copy_(own)
    acc[:m].add_(own_res)
    for bits_s, scales_s in srcs:
        kernels.sign_decompress_accumulate(bits_s, scales_s, acc, block=BLOCK)
    acc.mul_(0.5)
    res_composed = residual.clone()
    bits_c, scales_c = kernels.sign_compress(acc, block=BLOCK, residual=res_composed)
    bits, scales = torch.empty(-(-n // 8), dtype=torch.uint8), torch.empty(5)
    kernels.reduce_sign_compress(
        own, srcs, bits, scales, numel=n, block=BLOCK, factor=0.5, own_residual=own_res.clone(), residual=residual
    )
    assert torch.equal(bits, bits_c) and torch.equal(scales, scales_c) and torch.equal(residual, res_composed)


def test_sign_bad_input():
    n = 2 * BLOCK
    own, bits, scales = torch.randn(n), torch.empty(n // 8, dtype=torch.uint8), torch.empty(2)
    with pytest.raises(ValueError, match="block must be a positive multiple of 8"):
        kernels.reduce_sign_compress(own, [], bits, scales, numel=n, block=12)
    with pytest.raises(ValueError, match=r"output data: expected 64 elements, got 63"):
        kernels.reduce_sign_compress(own, [], bits[:63], scales, numel=n)
    with pytest.raises(TypeError, match=r"sources\[0\] data"):
        kernels.reduce_sign_compress(own, [(torch.empty(n // 8), scales)], bits, scales, numel=n)
    with pytest.raises(ValueError, match="numel"):
        kernels.reduce_sign_compress(own, [], bits, scales, numel=-1)


# ---- decoded_out: the own elements' decode, written by the reduce pass --------------------------------


@pytest.mark.parametrize("codec", ["int8", "1bit"])
@pytest.mark.parametrize("n,own_numel", CASES + [(9, 9), (3 * BLOCK + 8, BLOCK + 1)])
@pytest.mark.parametrize("in_place", [False, True])
def test_decoded_out_is_the_decode_of_the_encoding(codec, n, own_numel, in_place):
    """decoded_out = decode(the encoding written)[:own_numel], bit for bit, also when it is own itself
    (as the quantized all-reduce calls it: t's chunk in, its reduced value out); the encoding and the
    residuals are those of the call without decoded_out."""
    g = torch.Generator().manual_seed(n + own_numel)
    own = torch.randn(own_numel, generator=g)
    own_res, residual = torch.randn(own_numel, generator=g) * 0.1, torch.randn(n, generator=g) * 0.1
    if codec == "int8":
        srcs = encodings(n, 2, BLOCK, seed=n)
        data = lambda: torch.empty(n, dtype=torch.int8)  # noqa: E731
        run = lambda o, d, s, orr, r, out: kernels.reduce_quantize_int8(  # noqa: E731
            o, srcs, d, s, block=BLOCK, factor=0.5, own_residual=orr, residual=r, decoded_out=out
        )
        decode = lambda d, s: kernels.dequantize_int8(d, s, torch.empty(n), block=BLOCK)  # noqa: E731
    else:
        srcs = [kernels.sign_compress(torch.randn(n, generator=g), block=BLOCK) for _ in range(2)]
        data = lambda: torch.empty(-(-n // 8), dtype=torch.uint8)  # noqa: E731
        run = lambda o, d, s, orr, r, out: kernels.reduce_sign_compress(  # noqa: E731
            o, srcs, d, s, numel=n, block=BLOCK, factor=0.5, own_residual=orr, residual=r, decoded_out=out
        )
        decode = lambda d, s: kernels.sign_decompress(d, s, torch.empty(n), block=BLOCK)  # noqa: E731
    d_e, s_e, own_res_e, res_e = data(), torch.empty(-(-n // BLOCK)), own_res.clone(), residual.clone()
    run(own.clone(), d_e, s_e, own_res_e, res_e, None)
    d, s, own_res_k, res_k = data(), torch.empty(-(-n // BLOCK)), own_res.clone(), residual.clone()
    x = own.clone()
    out = x if in_place else torch.full((own_numel,), float("nan"))
    run(x, d, s, own_res_k, res_k, out)
    assert torch.equal(d, d_e) and torch.equal(s, s_e)
    assert torch.equal(res_k, res_e) and torch.equal(own_res_k, own_res_e)
    assert torch.equal(out, decode(d, s)[:own_numel])


def test_spent_own_residual_stays_zero_across_calls():
    """Error feedback across calls: the own residual is zeroed on the first call (a -0.0 too) and stays
    zero after (the kernel then skips writing it), while the server residual carries on as composed."""
    n, m = 4 * BLOCK + 24, 3 * BLOCK + 8
    own_res = torch.randn(m) * 0.1
    own_res[m - 1] = -0.0
    residual, res_composed = torch.zeros(n), torch.zeros(n)
    for call in range(3):
        own = torch.randn(m, generator=torch.Generator().manual_seed(call))
        srcs = [kernels.sign_compress(torch.randn(n), block=BLOCK) for _ in range(2)]
        acc = torch.zeros(n)
        acc[:m] = own + own_res if call == 0 else own + 0.0
        for bits_s, scales_s in srcs:
            kernels.sign_decompress_accumulate(bits_s, scales_s, acc, block=BLOCK)
        bits_c, scales_c = kernels.sign_compress(acc, block=BLOCK, residual=res_composed)
        bits, scales = torch.empty(-(-n // 8), dtype=torch.uint8), torch.empty(5)
        kernels.reduce_sign_compress(
            own, srcs, bits, scales, numel=n, block=BLOCK, own_residual=own_res, residual=residual, decoded_out=own
        )
        assert torch.equal(bits, bits_c) and torch.equal(scales, scales_c) and torch.equal(residual, res_composed)
        assert own_res.view(torch.int32).eq(0).all()  # +0.0 bits: the -0.0 was written over
        assert torch.equal(own, kernels.sign_decompress(bits, scales, torch.empty(n), block=BLOCK)[:m])


def test_decoded_out_bad_input():
    a = _args()
    with pytest.raises(ValueError, match="decoded_out: expected 512 elements, got 3"):
        kernels.reduce_quantize_int8(a["own"], a["sources"], a["q"], a["scales"], decoded_out=torch.zeros(3))
    with pytest.raises(TypeError, match="decoded_out"):
        kernels.reduce_quantize_int8(
            a["own"], a["sources"], a["q"], a["scales"], decoded_out=torch.zeros(2 * BLOCK, dtype=torch.float64)
        )
