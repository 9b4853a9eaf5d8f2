"""Blockwise symmetric absmax quantization, int8 and int4: one fp32 scale = max|x| / L per block of
`block` elements (the last block may be short; L = 127 for int8, 7 for int4), levels round(x / scale)
in [-L, L] or stochastic floor(x / scale + u), and its inverse. int8 stores one level per byte; int4
two per byte (element 2k in the low nibble of byte k, 2k + 1 in the high one, each a 4-bit two's
complement; an odd tensor's last high nibble is 0), so its blocks are even.

The uniform numbers u come from a counter-based hash of (seed, element index), so the CPU and the
GPU produce the same bytes for the same seed (int8 and int4 draw the same u). With `residual` (fp32,
error feedback), v = x + residual is encoded and residual becomes v - dequantize(q): exactly what the
encoding lost."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm._validate import check_bool
from pycomm.kernels._buffer_checks import (
    FLOAT_DTYPES,
    check_block,
    check_buffer,
    check_numel,
    check_seed,
    decode_call,
    num_blocks,
    output,
)
from pycomm.kernels._reduce_encode import kernel, reduce_encode


def int4_bytes(numel: int) -> int:
    """Bytes of packed int4 levels for `numel` elements."""
    return -(-check_numel(numel, "int4_bytes") // 2)


# format -> (levels' dtype, elements per byte, the argument's name)
_FORMATS = {"int8": (torch.int8, 1, "q"), "int4": (torch.uint8, 2, "packed")}


def _quantize(
    fmt: str,
    x: torch.Tensor,
    q: torch.Tensor | None,
    scales: torch.Tensor | None,
    block: int,
    stochastic: bool,
    seed: int,
    residual: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    what = f"quantize_{fmt}"
    dtype, per_byte, q_name = _FORMATS[fmt]
    check_block(block, what, multiple=per_byte)
    stochastic = check_bool(stochastic, f"{what}: stochastic")
    x = check_tensor(x, f"{what}: x", FLOAT_DTYPES)
    n = x.numel()
    q = output(q, f"{what}: {q_name}", dtype, -(-n // per_byte), x)
    scales = output(scales, f"{what}: scales", torch.float32, num_blocks(n, block), x)
    if residual is not None:
        check_buffer(residual, f"{what}: residual", (torch.float32,), n)
    place = place_of([x, q, scales] + ([residual] if residual is not None else []), what)
    getattr(core(), what)(
        ptr(x),
        _dtypes.code(x.dtype, what),
        n,
        block,
        ptr(q),
        ptr(scales),
        ptr(residual) if residual is not None else 0,
        stochastic,
        check_seed(seed, what),
        place.device,
        place.stream,
    )
    return q, scales


def _dequantize(
    fmt: str, q: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, block: int, accumulate: bool
) -> torch.Tensor:
    dtype, per_byte, q_name = _FORMATS[fmt]
    n = out.numel() if isinstance(out, torch.Tensor) else 0
    return decode_call(
        getattr(core(), f"dequantize_{fmt}"),
        q,
        scales,
        out,
        block=block,
        accumulate=accumulate,
        data_dtype=dtype,
        data_numel=-(-n // per_byte),
        block_multiple=per_byte,
        what=f"dequantize_{fmt}{'_accumulate' if accumulate else ''}",
        out_name="acc" if accumulate else "out",
        data_name=q_name,
    )


def quantize_int8(
    x: torch.Tensor,
    q: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    *,
    block: int = 256,
    stochastic: bool = False,
    seed: int = 0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` (fp32/bf16/fp16/fp64, any shape) into int8 `q` (x.numel() elements) and fp32
    `scales` (ceil(numel / block)); either output is allocated when not given. Returns (q, scales)."""
    return _quantize("int8", x, q, scales, block, stochastic, seed, residual)


def quantize_int4(
    x: torch.Tensor,
    packed: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    *,
    block: int = 128,
    stochastic: bool = False,
    seed: int = 0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` (fp32/bf16/fp16/fp64, any shape) into uint8 `packed` (int4_bytes(numel): two levels per
    byte) and fp32 `scales` (ceil(numel / block), block even); either output is allocated when not given.
    Returns (packed, scales)."""
    return _quantize("int4", x, packed, scales, block, stochastic, seed, residual)


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, *, block: int = 256) -> torch.Tensor:
    """out = q * scale (cast to out.dtype: fp32/bf16/fp16/fp64). Returns `out`."""
    return _dequantize("int8", q, scales, out, block, False)


def dequantize_int8_accumulate(
    q: torch.Tensor, scales: torch.Tensor, acc: torch.Tensor, *, block: int = 256
) -> torch.Tensor:
    """acc += q * scale (the reduce step of a quantized all-reduce; acc is normally fp32). Returns `acc`."""
    return _dequantize("int8", q, scales, acc, block, True)


def dequantize_int4(packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, *, block: int = 128) -> torch.Tensor:
    """out = level * scale (cast to out.dtype). Returns `out`."""
    return _dequantize("int4", packed, scales, out, block, False)


def dequantize_int4_accumulate(
    packed: torch.Tensor, scales: torch.Tensor, acc: torch.Tensor, *, block: int = 128
) -> torch.Tensor:
    """acc += level * scale. Returns `acc`."""
    return _dequantize("int4", packed, scales, acc, block, True)


def reduce_quantize_int8(
    own: torch.Tensor,
    sources: Sequence[tuple[torch.Tensor, torch.Tensor]],
    q: torch.Tensor,
    scales: torch.Tensor,
    *,
    block: int = 256,
    factor: float = 1.0,
    own_residual: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    stochastic: bool = False,
    seed: int = 0,
    decoded_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reduce step of a quantized all-reduce in one pass per block (CPU tensors): the reduced chunk
    v = (own (+ own_residual) + the sum of dequantize_int8(q_s, scales_s) over `sources`) * factor is
    encoded into q (q.numel() elements) and scales as quantize_int8(v, residual=..., stochastic=...,
    seed=...) encodes it. own (fp32, at most q.numel() elements) fills the start of v and the rest starts
    at 0; own_residual (own's size) is zeroed. Bit-identical to those kernels run one after another, but
    v never leaves the cache. decoded_out (fp32, own's size; may be own): also set to
    dequantize_int8 of the first own.numel() elements of the result. Returns (q, scales)."""
    what = "reduce_quantize_int8"
    q = check_tensor(q, f"{what}: q", (torch.int8,))
    return reduce_encode(
        kernel(what),
        what,
        own,
        sources,
        q,
        scales,
        numel=q.numel(),
        data_dtype=torch.int8,
        data_numel=q.numel(),
        block=block,
        block_multiple=1,
        factor=factor,
        own_residual=own_residual,
        residual=residual,
        stochastic=stochastic,
        seed=seed,
        decoded_out=decoded_out,
    )


def reduce_quantize_int4(
    own: torch.Tensor,
    sources: Sequence[tuple[torch.Tensor, torch.Tensor]],
    packed: torch.Tensor,
    scales: torch.Tensor,
    *,
    numel: int,
    block: int = 128,
    factor: float = 1.0,
    own_residual: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    stochastic: bool = False,
    seed: int = 0,
    decoded_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """reduce_quantize_int8 for int4 levels: v, of `numel` elements (packed holds int4_bytes(numel)), is
    encoded as quantize_int4(v, ...) encodes it. Returns (packed, scales)."""
    what = "reduce_quantize_int4"
    n = check_numel(numel, what)
    return reduce_encode(
        kernel(what),
        what,
        own,
        sources,
        packed,
        scales,
        numel=n,
        data_dtype=torch.uint8,
        data_numel=int4_bytes(n),
        block=block,
        block_multiple=2,
        factor=factor,
        own_residual=own_residual,
        residual=residual,
        stochastic=stochastic,
        seed=seed,
        decoded_out=decoded_out,
    )
