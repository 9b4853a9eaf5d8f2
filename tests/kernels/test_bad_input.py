"""Bad input raises a clear Python exception naming the argument: never a crash or a wrong answer."""

import pytest
import torch

import pycomm
from pycomm import kernels
from pycomm._build import core

X = torch.randn(300)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        # non-contiguous
        (
            lambda: kernels.quantize_int8(torch.randn(10, 10).t()),
            ValueError,
            "quantize_int8: x: tensor must be contiguous",
        ),
        (lambda: kernels.sign_compress(torch.randn(10, 10)[:, ::2]), ValueError, "sign_compress: x: .*contiguous"),
        (lambda: kernels.pack([torch.randn(4, 4).t()], torch.empty(16)), ValueError, r"pack: tensors\[0\].*contiguous"),
        (
            lambda: kernels.averaging_apply([torch.randn(4)], torch.randn(8)[::2], torch.randn(4)),
            ValueError,
            "averaging_apply: avg: .*contiguous",
        ),
        # wrong dtype
        (lambda: kernels.quantize_int8(torch.arange(10)), TypeError, "quantize_int8: x: dtype torch.int64"),
        (lambda: kernels.quantize_int8(X, q=torch.empty(300, dtype=torch.uint8)), TypeError, "quantize_int8: q: dtype"),
        (
            lambda: kernels.quantize_int8(X, residual=torch.zeros(300, dtype=torch.float16)),
            TypeError,
            "quantize_int8: residual: dtype",
        ),
        (
            lambda: kernels.dequantize_int8(
                torch.zeros(300, dtype=torch.int8), torch.zeros(2), torch.empty(300, dtype=torch.int32)
            ),
            TypeError,
            "dequantize_int8: out: dtype",
        ),
        (
            lambda: kernels.sign_decompress(torch.zeros(38, dtype=torch.int8), torch.zeros(2), torch.empty(300)),
            TypeError,
            "sign_decompress: bits: dtype",
        ),
        (
            lambda: kernels.pack([torch.arange(4)], torch.empty(4), scale=0.5),
            ValueError,
            "pack: a cast or scale needs floating",
        ),
        (
            lambda: kernels.pack([torch.randn(2), torch.randn(2).half()], torch.empty(4)),
            TypeError,
            "pack: all tensors must share",
        ),
        (
            lambda: kernels.elastic_update([torch.arange(4)], torch.randn(4), 0.1),
            TypeError,
            r"elastic_update: tensors\[0\]: dtype",
        ),
        (
            lambda: kernels.averaging_apply([torch.randn(4)], torch.randn(4), torch.randn(4).half()),
            ValueError,
            "averaging_apply: snapshot must have avg's dtype and length",
        ),
        # mismatched sizes
        (
            lambda: kernels.quantize_int8(X, q=torch.empty(299, dtype=torch.int8)),
            ValueError,
            "q: expected 300 elements, got 299",
        ),
        (lambda: kernels.quantize_int8(X, scales=torch.empty(1)), ValueError, "scales: expected 2 elements, got 1"),
        (lambda: kernels.quantize_int8(X, residual=torch.zeros(30)), ValueError, "residual: expected 300 elements"),
        (
            lambda: kernels.dequantize_int8(torch.zeros(299, dtype=torch.int8), torch.zeros(2), torch.empty(300)),
            ValueError,
            "dequantize_int8: q: expected 300",
        ),
        (
            lambda: kernels.sign_compress(X, bits=torch.empty(37, dtype=torch.uint8)),
            ValueError,
            "bits: expected 38 elements",
        ),
        (
            lambda: kernels.sign_decompress_accumulate(
                torch.zeros(38, dtype=torch.uint8), torch.zeros(3), torch.empty(300)
            ),
            ValueError,
            "scales: expected 2 elements, got 3",
        ),
        (
            lambda: kernels.pack([torch.randn(5)], torch.empty(4)),
            ValueError,
            "bucket has 4 elements, the tensors need 5",
        ),
        (
            lambda: kernels.pack([torch.randn(5)], torch.empty(8), offsets=[4]),
            ValueError,
            "does not fit in a bucket of 8",
        ),
        (
            lambda: kernels.unpack(torch.empty(8), [torch.randn(5)], offsets=[0, 1]),
            ValueError,
            "got 2 offsets for 1 tensors",
        ),
        (
            lambda: kernels.elastic_update([torch.randn(5)], torch.randn(4), 0.1),
            ValueError,
            "elastic_update: centre has 4 elements",
        ),
        (
            lambda: kernels.averaging_apply([torch.randn(5)], torch.randn(5), torch.randn(6)),
            ValueError,
            r"snapshot must have avg's dtype and length \(torch.float32\[5\]\), got torch.float32\[6\]",
        ),
        # bad parameters
        (lambda: kernels.quantize_int8(X, block=0), ValueError, "quantize_int8: block must be a positive int"),
        (
            lambda: kernels.sign_compress(X, block=12),
            ValueError,
            "sign_compress: block must be a positive multiple of 8",
        ),
        (
            lambda: kernels.quantize_int8(X, stochastic=True, seed=-3),
            ValueError,
            r"seed must be an int in \[0, 2\*\*64\)",
        ),
        (lambda: kernels.pack(torch.randn(4), torch.empty(4)), TypeError, "tensors must be a sequence"),
        (lambda: kernels.quantize_int8([1.0, 2.0]), TypeError, "expected a torch.Tensor, got list"),
        # each must raise naming the argument, never pass silently
        (
            lambda: kernels.averaging_apply([torch.randn(4)], torch.randn(4), None),
            TypeError,
            "averaging_apply: snapshot: expected a torch.Tensor, got NoneType",
        ),  # was x += avg
        (
            lambda: kernels.pack([torch.randn(4)], torch.empty(8), offsets=[1.5]),
            TypeError,
            r"pack: offsets\[0\] must be an int, got float 1.5",
        ),  # was truncated to 1
        (
            lambda: kernels.pack([torch.randn(4)], torch.empty(8), offsets=[True]),
            TypeError,
            r"offsets\[0\] must be an int",
        ),
        (
            lambda: kernels.unpack(torch.empty(8), [torch.randn(4)], offsets=[-1]),
            ValueError,
            r"unpack: offsets\[0\] must be",
        ),
        (lambda: kernels.pack([torch.randn(4)], torch.empty(8), scale="2"), TypeError, "pack: scale must be a number"),
        (
            lambda: kernels.elastic_update([torch.randn(4)], torch.randn(4), float("nan")),
            ValueError,
            "elastic_update: a must be a finite number",
        ),
        (
            lambda: kernels.quantize_int8(X, stochastic="no"),
            TypeError,
            "quantize_int8: stochastic must be True or False",
        ),
        (lambda: pycomm.Int8Codec(stochastic="no"), TypeError, "Int8Codec: stochastic must be True or False"),
        (
            lambda: kernels.num_blocks(10, 0),
            ValueError,
            "num_blocks: block must be a positive int",
        ),  # ZeroDivisionError
        (lambda: kernels.num_blocks(-10, 4), ValueError, r"num_blocks: numel must be an int in \[0, "),
        (lambda: kernels.sign_bytes(-9), ValueError, r"sign_bytes: numel must be an int in \[0, "),
        (lambda: pycomm.Int8Codec().data_numel(-3), ValueError, "data_numel: numel must be"),
        (lambda: pycomm.OneBitCodec().empty(-3), ValueError, "empty: numel must be"),
        (lambda: pycomm.Int8Codec().wire_bytes(2.5), TypeError, "wire_bytes: numel must be an int"),
        (
            lambda: pycomm.Int8Codec(block=2**40),
            ValueError,
            r"Int8Codec: block must be a positive int, at most 2\*\*31",
        ),
        (lambda: kernels.quantize_int8(X, block=2**64), ValueError, "quantize_int8: block must be"),  # was pybind's
        (
            lambda: pycomm.Int8Codec().slice(pycomm.Int8Codec().encode(X), 1, 256),
            ValueError,
            "slice: start and stop .* must be multiples of block=256",
        ),
        # devices
        (lambda: kernels.quantize_int8(torch.empty(4, device="meta")), ValueError, "tensors on meta are not supported"),
        (
            lambda: kernels.quantize_int8(X, q=torch.empty(300, dtype=torch.int8, device="meta")),
            ValueError,
            "all tensors must be on one device",
        ),
        (
            lambda: kernels.averaging_apply([torch.randn(4)], torch.randn(4), torch.randn(4, device="meta")),
            ValueError,
            "all tensors must be on one device",
        ),
    ],
)
def test_bad_input_raises(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_codec_decode_checks():
    codec = pycomm.Int8Codec()
    with pytest.raises(TypeError, match="Int8Codec.decode: enc must be an Encoded"):
        codec.decode(torch.zeros(4), torch.empty(4))
    enc = codec.encode(torch.randn(10))
    with pytest.raises(TypeError, match="dequantize_int8: out: dtype"):
        codec.decode(enc, torch.empty(10, dtype=torch.int32))


# The compiled layer re-checks what C++ can see, for callers that bypass the Python wrappers.
@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda c: c.quantize_int8(0, 0, 10, 256, 0, 0, 0, False, 0, -1, 0),
            "quantize_int8: x, q and scales need data",
        ),
        (
            lambda c: c.quantize_int8(0, 4, 0, 256, 0, 0, 0, False, 0, -1, 0),
            "quantize_int8: dtype int8 is not supported",
        ),
        (lambda c: c.quantize_int8(0, 0, 0, 0, 0, 0, 0, False, 0, -1, 0), "quantize_int8: block must be >= 1"),
        (lambda c: c.quantize_int8(0, 99, 0, 256, 0, 0, 0, False, 0, -1, 0), "unknown dtype code 99"),
        (lambda c: c.dequantize_int8(0, 0, 10, 256, 0, 0, False, -1, 0), "q, scales and out need data"),
        (lambda c: c.sign_compress(0, 0, 10, 256, 0, 0, 0, -1, 0), "x, bits and scales need data"),
        (lambda c: c.sign_decompress(0, 0, 0, 7, 0, 0, False, -1, 0), "block must be a positive multiple of 8"),
        (lambda c: c.bucket_update([0], [0], [4], 0, 0, 0, 4, 0, 1.0, 1.0, 0.0, -1, 0), "null data pointer"),
        (lambda c: c.bucket_update([1], [2], [4], 0, 1, 0, 4, 0, 1.0, 1.0, 0.0, -1, 0), "does not fit"),
        (lambda c: c.bucket_update([1], [0], [4], 6, 1, 0, 4, 0, 1.0, 1.0, 0.0, -1, 0), "dtype int32 is not supported"),
    ],
)
def test_raw_entry_points_check_their_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call(core())


@pytest.mark.skipif(pycomm.build_info()["cuda"] or pycomm.build_info()["hip"], reason="this build has GPU kernels")
@pytest.mark.parametrize(
    "name, args",
    [
        ("quantize_int8", (0, 0, 0, 256, 0, 0, 0, False, 0)),
        ("dequantize_int8", (0, 0, 0, 256, 0, 0, False)),
        ("sign_compress", (0, 0, 0, 256, 0, 0, 0)),
        ("sign_decompress", (0, 0, 0, 256, 0, 0, False)),
        ("bucket_update", ([], [], [], 0, 0, 0, 0, 0, 1.0, 1.0, 0.0)),
        ("pack", ([], [], [], 0, 0, 0, 0, 1.0)),
    ],
)
def test_gpu_buffer_on_a_cpu_build_is_refused(name, args):
    """A CUDA tensor reaches C++ as device >= 0; a build without GPU kernels refuses it."""
    with pytest.raises(ValueError, match=f"{name}: got a GPU buffer, but this build of pycomm has no CUDA/HIP"):
        getattr(core(), name)(*args, 0, 0)


@pytest.mark.skipif(
    not torch.cuda.is_available() or pycomm.build_info()["cuda"] or pycomm.build_info()["hip"],
    reason="needs a GPU that this build of pycomm does not support",
)
def test_cuda_tensor_on_a_cpu_build_is_refused_in_python():
    with pytest.raises(RuntimeError, match="quantize_int8: got a tensor on cuda.*no (CUDA|HIP) support"):
        kernels.quantize_int8(torch.empty(4, device="cuda"))


def test_error_bound_allocates_nothing_block_sized():
    """A block far beyond the tensor is one short block: the bound of a 10-element tensor with
    block=2**31 is computed from its 10 elements (it once padded x to a whole block: 8 GiB here)."""
    x = torch.randn(10)
    bound = pycomm.Int8Codec(block=2**31).error_bound(x)
    assert bound.shape == (10,)
    assert torch.allclose(bound, x.abs().max() / 127 * (0.5 + 2**-15))
