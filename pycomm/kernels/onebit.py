"""1-bit sign compression with error feedback (1-bit SGD / 1-bit Adam).

v = x + residual; per block of `block` elements (a multiple of 8) scale = mean|v|; bit = (v >= 0),
element i in bit i % 8 of byte i // 8 (the last byte zero-padded); residual <- v - decompress,
exactly what the encoding lost. Decompression gives +scale for a set bit and -scale otherwise."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm.kernels._buffer_checks import (
    FLOAT_DTYPES,
    check_block,
    check_buffer,
    check_numel,
    decode_call,
    num_blocks,
    output,
)
from pycomm.kernels._reduce_encode import kernel, reduce_encode


def sign_bytes(numel: int) -> int:
    """Bytes of sign bits for `numel` elements."""
    return -(-check_numel(numel, "sign_bytes") // 8)


def sign_compress(
    x: torch.Tensor,
    bits: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    *,
    block: int = 256,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compress `x` (fp32/bf16/fp16/fp64, any shape) into uint8 `bits` (ceil(numel / 8)) and fp32
    `scales` (ceil(numel / block)), allocated when not given; `residual` (fp32, numel) is read and
    updated in place. Returns (bits, scales)."""
    what = "sign_compress"
    check_block(block, what, multiple=8)
    x = check_tensor(x, f"{what}: x", FLOAT_DTYPES)
    n = x.numel()
    bits = output(bits, f"{what}: bits", torch.uint8, sign_bytes(n), x)
    scales = output(scales, f"{what}: scales", torch.float32, num_blocks(n, block), x)
    if residual is not None:
        check_buffer(residual, f"{what}: residual", (torch.float32,), n)
    place = place_of([x, bits, scales] + ([residual] if residual is not None else []), what)
    core().sign_compress(
        ptr(x),
        _dtypes.code(x.dtype, what),
        n,
        block,
        ptr(bits),
        ptr(scales),
        ptr(residual) if residual is not None else 0,
        place.device,
        place.stream,
    )
    return bits, scales


def _decompress(
    bits: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, block: int, accumulate: bool, what: str
) -> torch.Tensor:
    out_name = "acc" if accumulate else "out"
    n = out.numel() if isinstance(out, torch.Tensor) else 0
    return decode_call(
        core().sign_decompress,
        bits,
        scales,
        out,
        block=block,
        accumulate=accumulate,
        data_dtype=torch.uint8,
        data_numel=sign_bytes(n),
        block_multiple=8,
        what=what,
        out_name=out_name,
    )


def sign_decompress(bits: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, *, block: int = 256) -> torch.Tensor:
    """out = +scale where the bit is set, -scale elsewhere (cast to out.dtype). Returns `out`."""
    return _decompress(bits, scales, out, block, False, "sign_decompress")


def sign_decompress_accumulate(
    bits: torch.Tensor, scales: torch.Tensor, acc: torch.Tensor, *, block: int = 256
) -> torch.Tensor:
    """acc += decompressed signs. Returns `acc`."""
    return _decompress(bits, scales, acc, block, True, "sign_decompress_accumulate")


def reduce_sign_compress(
    own: torch.Tensor,
    sources: Sequence[tuple[torch.Tensor, torch.Tensor]],
    bits: torch.Tensor,
    scales: torch.Tensor,
    *,
    numel: int,
    block: int = 256,
    factor: float = 1.0,
    own_residual: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    decoded_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reduce step of a 1-bit all-reduce in one pass per block (CPU tensors): the reduced chunk of
    `numel` elements v = (own (+ own_residual) + the sum of sign_decompress(bits_s, scales_s) over
    `sources`) * factor is compressed into bits and scales as sign_compress(v, residual=...) compresses
    it. own (fp32, at most numel elements) fills the start of v and the rest starts at 0; own_residual
    (own's size) is zeroed. Bit-identical to those kernels run one after another. decoded_out (fp32,
    own's size; may be own): also set to sign_decompress of the result's first own.numel() elements.
    Returns (bits, scales)."""
    what = "reduce_sign_compress"
    n = check_numel(numel, what)
    return reduce_encode(
        kernel("reduce_sign_compress"),
        what,
        own,
        sources,
        bits,
        scales,
        numel=n,
        data_dtype=torch.uint8,
        data_numel=sign_bytes(n),
        block=block,
        block_multiple=8,
        factor=factor,
        own_residual=own_residual,
        residual=residual,
        decoded_out=decoded_out,
    )
