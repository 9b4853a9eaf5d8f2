"""pycomm.Int8Codec, pycomm.Int4Codec and pycomm.OneBitCodec: round trip within the stated bound, wire size, slicing."""

import pytest
import torch

import pycomm
from pycomm.codecs import Encoded
from tests.kernels.test_quantize import DTYPES, sample

CODECS = [
    lambda: pycomm.Int8Codec(),
    lambda: pycomm.Int8Codec(block=64, stochastic=True, seed=11),
    lambda: pycomm.Int4Codec(),
    lambda: pycomm.Int4Codec(block=32, stochastic=True, seed=3),
    lambda: pycomm.OneBitCodec(),
    lambda: pycomm.OneBitCodec(block=32),
]


@pytest.mark.parametrize("make", CODECS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 255, 257, 3000])
def test_round_trip_within_bound(device, make, dtype, n):
    codec = make()
    x = sample(n, dtype, device)
    enc = codec.encode(x)
    assert isinstance(enc, Encoded) and enc.numel == n
    assert enc.nbytes == codec.wire_bytes(n)
    out = codec.decode(enc, torch.empty(n, device=device))
    err = (out - x.float()).abs().cpu()
    assert (err <= codec.error_bound(x).cpu()).all()
    acc = torch.ones(n, device=device)
    codec.decode_accumulate(enc, acc)
    torch.testing.assert_close(acc, out + 1)


def test_int8_bound_is_half_a_level():
    codec = pycomm.Int8Codec(block=4)
    x = torch.tensor([1.27, -0.5, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0])
    bound = codec.error_bound(x)
    torch.testing.assert_close(bound[:4], torch.full((4,), 0.005), rtol=1e-4, atol=0)
    assert (bound[4:] == 0).all()  # an all-zero block is exact


def test_wire_bytes():
    assert pycomm.Int8Codec(block=256).wire_bytes(1000) == 1000 + 4 * 4
    assert pycomm.OneBitCodec(block=256).wire_bytes(1000) == 125 + 4 * 4
    assert pycomm.Int4Codec(block=128).wire_bytes(1001) == 501 + 4 * 8
    assert pycomm.OneBitCodec(block=64).wire_bytes(0) == 0


@pytest.mark.parametrize("make", CODECS)
def test_slices_decode_like_the_whole(make):
    codec = make()
    x = torch.randn(10 * codec.block + 3)
    enc = codec.encode(x)
    whole = codec.decode(enc, torch.empty_like(x))
    for start, stop in [(0, codec.block), (codec.block, 4 * codec.block), (4 * codec.block, x.numel())]:
        part = codec.slice(enc, start, stop)
        assert part.numel == stop - start
        assert torch.equal(codec.decode(part, torch.empty(stop - start)), whole[start:stop])
    with pytest.raises(ValueError, match="multiples of block"):
        codec.slice(enc, 1, codec.block)


@pytest.mark.parametrize("make", CODECS)
def test_encode_into_preallocated(make):
    codec = make()
    x = torch.randn(1000)
    buf = codec.empty(1000)
    assert codec.encode(x, out=buf) is buf
    with pytest.raises(ValueError, match="out encodes 999"):
        codec.encode(x, out=codec.empty(999))
    with pytest.raises(ValueError, match="1000 elements"):
        codec.decode(buf, torch.empty(10))


def test_stochastic_codec_advances_its_seed():
    codec = pycomm.Int8Codec(stochastic=True, seed=5)
    x = torch.randn(4096)
    a, b = codec.encode(x).data.clone(), codec.encode(x).data.clone()
    assert not torch.equal(a, b)
    again = pycomm.Int8Codec(stochastic=True, seed=5)
    assert torch.equal(again.encode(x).data, a)  # reproducible run to run


@pytest.mark.parametrize("make", CODECS)
def test_error_feedback_residual(make):
    codec = make()
    assert codec.supports_error_feedback
    x = torch.randn(777)
    e = torch.randn(777) * 0.05
    v = x + e
    enc = codec.encode(x, residual=e)
    decoded = codec.decode(enc, torch.empty(777))
    torch.testing.assert_close(decoded + e, v, rtol=1e-6, atol=1e-7)
    assert ((decoded - v).abs() <= codec.error_bound(v)).all()


def test_constructor_validation():
    with pytest.raises(ValueError, match="multiple of 8"):
        pycomm.OneBitCodec(block=12)
    with pytest.raises(ValueError, match="block"):
        pycomm.Int8Codec(block=0)
    with pytest.raises(ValueError, match="seed"):
        pycomm.Int8Codec(stochastic=True, seed=-1)
