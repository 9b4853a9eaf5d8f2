"""int8 blockwise quantization: one fp32 scale = max|x| / 127 per block of `block` elements (the
last block may be short), q = round(x / scale) or stochastic floor(x / scale + u), and its inverse.

The uniform numbers u come from a counter-based hash of (seed, element index), so the CPU and the
GPU produce the same bytes for the same seed. With `residual` (fp32, error feedback), v = x +
residual is encoded and residual becomes v - dequantize(q): exactly what the encoding lost."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm._validate import check_bool
from pycomm.kernels._reduce_encode import kernel, reduce_encode
from pycomm.kernels._buffers import (FLOAT_DTYPES, check_block, check_buffer, check_seed, decode_call,
                                     num_blocks, output)


def quantize_int8(x: torch.Tensor, q: torch.Tensor | None = None, scales: torch.Tensor | None = None, *,
                  block: int = 256, stochastic: bool = False, seed: int = 0,
                  residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` (fp32/bf16/fp16/fp64, any shape) into int8 `q` (x.numel() elements) and fp32
    `scales` (ceil(numel / block)); either output is allocated when not given. Returns (q, scales)."""
    what = "quantize_int8"
    check_block(block, what)
    stochastic = check_bool(stochastic, f"{what}: stochastic")
    x = check_tensor(x, f"{what}: x", FLOAT_DTYPES)
    n = x.numel()
    q = output(q, f"{what}: q", torch.int8, n, x)
    scales = output(scales, f"{what}: scales", torch.float32, num_blocks(n, block), x)
    if residual is not None:
        check_buffer(residual, f"{what}: residual", (torch.float32,), n)
    place = place_of([x, q, scales] + ([residual] if residual is not None else []), what)
    core().quantize_int8(ptr(x), _dtypes.code(x.dtype, what), n, block, ptr(q), ptr(scales),
                         ptr(residual) if residual is not None else 0, stochastic, check_seed(seed, what),
                         place.device, place.stream)
    return q, scales


def _dequantize(q: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, block: int, accumulate: bool,
                what: str) -> torch.Tensor:
    out_name = "acc" if accumulate else "out"
    n = out.numel() if isinstance(out, torch.Tensor) else 0
    return decode_call(core().dequantize_int8, q, scales, out, block=block, accumulate=accumulate,
                       data_dtype=torch.int8, data_numel=n, block_multiple=1, what=what,
                       out_name=out_name)


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, *, block: int = 256) -> torch.Tensor:
    """out = q * scale (cast to out.dtype: fp32/bf16/fp16/fp64). Returns `out`."""
    return _dequantize(q, scales, out, block, False, "dequantize_int8")


def dequantize_int8_accumulate(q: torch.Tensor, scales: torch.Tensor, acc: torch.Tensor, *,
                               block: int = 256) -> torch.Tensor:
    """acc += q * scale (the reduce step of a quantized all-reduce; acc is normally fp32). Returns `acc`."""
    return _dequantize(q, scales, acc, block, True, "dequantize_int8_accumulate")


def reduce_quantize_int8(own: torch.Tensor, sources: Sequence[tuple[torch.Tensor, torch.Tensor]], q: torch.Tensor,
                         scales: torch.Tensor, *, block: int = 256, factor: float = 1.0,
                         own_residual: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                         stochastic: bool = False, seed: int = 0,
                         decoded_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The reduce step of a quantized all-reduce in one pass per block (CPU tensors): the reduced chunk
    v = (own (+ own_residual) + the sum of dequantize_int8(q_s, scales_s) over `sources`) * factor is
    encoded into q (q.numel() elements) and scales as quantize_int8(v, residual=..., stochastic=...,
    seed=...) encodes it. own (fp32, at most q.numel() elements) fills the start of v and the rest starts
    at 0; own_residual (own's size) is zeroed. Bit-identical to those kernels run one after another, but
    v never leaves the cache. decoded_out (fp32, own's size; may be own): also set to
    dequantize_int8 of the first own.numel() elements of the result. Returns (q, scales)."""
    what = "reduce_quantize_int8"
    q = check_tensor(q, f"{what}: q", (torch.int8,))
    return reduce_encode(kernel("reduce_quantize_int8"), what, own, sources, q, scales, numel=q.numel(),
                         data_dtype=torch.int8, data_numel=q.numel(), block=block, block_multiple=1, factor=factor,
                         own_residual=own_residual, residual=residual, stochastic=stochastic, seed=seed,
                         decoded_out=decoded_out)
