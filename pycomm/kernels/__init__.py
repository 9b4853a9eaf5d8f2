"""Python entry points of the compiled kernels (CPU always; CUDA or HIP when built).

Every function takes torch tensors, checks them (contiguous, dtype, sizes, one device, a build that
has that device) and hands raw buffers to pycomm._C. GPU kernels are launched on the current stream
of the tensors' device and do not synchronize the host."""

from pycomm.kernels._buffer_checks import num_blocks
from pycomm.kernels._segments import bucket_offsets
from pycomm.kernels.averaging_apply import averaging_apply
from pycomm.kernels.bucket_update import bucket_update
from pycomm.kernels.elastic import bucket_lerp, elastic_update
from pycomm.kernels.onebit import (
    reduce_sign_compress,
    sign_bytes,
    sign_compress,
    sign_decompress,
    sign_decompress_accumulate,
)
from pycomm.kernels.pack import WIRE_DTYPES, pack, unpack
from pycomm.kernels.quantize import (
    dequantize_int4,
    dequantize_int4_accumulate,
    dequantize_int8,
    dequantize_int8_accumulate,
    int4_bytes,
    quantize_int4,
    quantize_int8,
    reduce_quantize_int4,
    reduce_quantize_int8,
)

__all__ = [
    "WIRE_DTYPES",
    "averaging_apply",
    "bucket_lerp",
    "bucket_offsets",
    "bucket_update",
    "dequantize_int4",
    "dequantize_int4_accumulate",
    "dequantize_int8",
    "dequantize_int8_accumulate",
    "elastic_update",
    "int4_bytes",
    "num_blocks",
    "pack",
    "quantize_int4",
    "quantize_int8",
    "reduce_quantize_int4",
    "reduce_quantize_int8",
    "reduce_sign_compress",
    "sign_bytes",
    "sign_compress",
    "sign_decompress",
    "sign_decompress_accumulate",
    "unpack",
]
