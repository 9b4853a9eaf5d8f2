"""Bad-argument cases of pycomm.kernels."""

from __future__ import annotations

from typing import Iterator

import torch

from pycomm import kernels
from tests.comm.bad_arguments.cases import (
    BAD_BOOL,
    BAD_FLOAT,
    BAD_INT_NONNEGATIVE,
    BAD_INT_POSITIVE,
    BAD_OFFSETS,
    BAD_TENSORS,
    BLOCK,
    Case,
    N,
    f32,
    input_tensor,
    tensor_arg,
    vary,
    without,
)


def kernel_cases() -> Iterator[Case]:
    yield from vary(
        "kernels.num_blocks",
        kernels.num_blocks,
        lambda: dict(numel=N, block=BLOCK),
        dict(numel=BAD_INT_NONNEGATIVE, block=BAD_INT_POSITIVE),
    )
    yield from vary("kernels.sign_bytes", kernels.sign_bytes, lambda: dict(numel=N), dict(numel=BAD_INT_NONNEGATIVE))
    yield from vary(
        "kernels.bucket_offsets",
        kernels.bucket_offsets,
        lambda: dict(tensors=[f32(4)], align=1),
        dict(tensors=without(BAD_TENSORS, "int tensors", "non-contiguous"), align=without(BAD_INT_POSITIVE, "huge")),
    )
    multi = dict(tensors=BAD_TENSORS, offsets=BAD_OFFSETS)
    yield from vary(
        "kernels.pack",
        kernels.pack,
        lambda: dict(tensors=[f32(4)], bucket=f32(8), offsets=None, scale=1.0),
        dict(multi, bucket=input_tensor(8), scale=BAD_FLOAT),
    )
    yield from vary(
        "kernels.unpack",
        kernels.unpack,
        lambda: dict(bucket=f32(8), tensors=[f32(4)], offsets=None, scale=1.0),
        dict(multi, bucket=input_tensor(8), scale=BAD_FLOAT),
    )
    yield from vary(
        "kernels.averaging_apply",
        kernels.averaging_apply,
        lambda: dict(tensors=[f32(4)], avg=f32(4), snapshot=f32(4), offsets=None),
        dict(multi, avg=input_tensor(4), snapshot=tensor_arg(4)),
    )
    yield from vary(
        "kernels.elastic_update",
        kernels.elastic_update,
        lambda: dict(tensors=[f32(4)], centre=f32(4), a=0.5, offsets=None),
        dict(multi, centre=input_tensor(4), a=BAD_FLOAT),
    )
    yield from vary(
        "kernels.bucket_lerp",
        kernels.bucket_lerp,
        lambda: dict(tensors=[f32(4)], y=f32(4), z=f32(4), a=0.5, offsets=None),
        dict(multi, y=input_tensor(4), z=tensor_arg(4), a=BAD_FLOAT),
    )
    yield from vary(
        "kernels.bucket_update",
        kernels.bucket_update,
        lambda: dict(tensors=[f32(4)], y=f32(4), alpha=1.0, beta=1.0, z=None, gamma=0.0, offsets=None),
        dict(
            multi, y=input_tensor(4), z=tensor_arg(4, optional=True), alpha=BAD_FLOAT, beta=BAD_FLOAT, gamma=BAD_FLOAT
        ),
    )
    yield from vary(
        "kernels.quantize_int8",
        kernels.quantize_int8,
        lambda: dict(x=f32(), q=None, scales=None, block=BLOCK, stochastic=False, seed=0, residual=None),
        dict(
            x=input_tensor(N),
            q=tensor_arg(N, torch.int8, optional=True),
            scales=tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE,
            stochastic=BAD_BOOL,
            seed=BAD_INT_NONNEGATIVE,
            residual=tensor_arg(N, optional=True),
        ),
    )
    yield from vary(
        "kernels.quantize_int4",
        kernels.quantize_int4,
        lambda: dict(x=f32(), packed=None, scales=None, block=BLOCK, stochastic=False, seed=0, residual=None),
        dict(
            x=input_tensor(N),
            packed=tensor_arg(N // 2, torch.uint8, optional=True),
            scales=tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE + [("odd", 255)],
            stochastic=BAD_BOOL,
            seed=BAD_INT_NONNEGATIVE,
            residual=tensor_arg(N, optional=True),
        ),
    )
    yield from vary(
        "kernels.sign_compress",
        kernels.sign_compress,
        lambda: dict(x=f32(), bits=None, scales=None, block=BLOCK, residual=None),
        dict(
            x=input_tensor(N),
            bits=tensor_arg(38, torch.uint8, optional=True),
            scales=tensor_arg(2, optional=True),
            block=BAD_INT_POSITIVE,
            residual=tensor_arg(N, optional=True),
        ),
    )
    for name, data, dtype, out, n_data in (
        ("dequantize_int8", "q", torch.int8, "out", N),
        ("dequantize_int8_accumulate", "q", torch.int8, "acc", N),
        ("dequantize_int4", "packed", torch.uint8, "out", N // 2),
        ("dequantize_int4_accumulate", "packed", torch.uint8, "acc", N // 2),
        ("sign_decompress", "bits", torch.uint8, "out", 38),
        ("sign_decompress_accumulate", "bits", torch.uint8, "acc", 38),
    ):
        yield from vary(
            f"kernels.{name}",
            getattr(kernels, name),
            lambda n_data=n_data, data=data, dtype=dtype, out=out: {
                data: torch.zeros(n_data, dtype=dtype),
                "scales": f32(2),
                out: f32(),
                "block": BLOCK,
            },
            {
                data: tensor_arg(n_data, dtype),
                "scales": tensor_arg(2),
                out: input_tensor(N),
                "block": BAD_INT_POSITIVE,
            },
        )
