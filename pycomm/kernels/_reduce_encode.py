"""Checks and the call of the fused reduce step of a quantized all-reduce (csrc/kernels/reduce_encode.h),
shared by reduce_quantize_int8 (quantize.py) and reduce_sign_compress (onebit.py): the reduced chunk
v = (own (+ own_residual) + the sum of the sources' decodes) * factor is encoded in one pass per block;
decoded_out (optional, own's size, may be own) receives the decode of that encoding's first own.numel()
elements, written while the block is in cache."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm._validate import check_bool
from pycomm.kernels._buffer_checks import check_block, check_buffer, check_seed, num_blocks


def reduce_encode(
    entry: Any,
    what: str,
    own: torch.Tensor,
    sources: Sequence[tuple[torch.Tensor, torch.Tensor]],
    data: torch.Tensor,
    scales: torch.Tensor,
    *,
    numel: int,
    data_dtype: torch.dtype,
    data_numel: int,
    block: int,
    block_multiple: int,
    factor: float,
    own_residual: torch.Tensor | None,
    residual: torch.Tensor | None,
    stochastic: bool = False,
    seed: int = 0,
    decoded_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_block(block, what, multiple=block_multiple)
    stochastic = check_bool(stochastic, f"{what}: stochastic")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise TypeError(f"{what}: factor must be a float (1.0 for SUM, 1 / size for AVG), got {type(factor).__name__}")
    own = check_tensor(own, f"{what}: own", (torch.float32,))
    if own.numel() > numel:
        raise ValueError(f"{what}: own has {own.numel()} elements, more than the {numel} encoded")
    if own_residual is not None:
        check_buffer(own_residual, f"{what}: own_residual", (torch.float32,), own.numel())
    if not isinstance(sources, (list, tuple)):
        raise TypeError(f"{what}: sources must be a list of (data, scales) pairs, got {type(sources).__name__}")
    nb = num_blocks(numel, block)
    for s, pair in enumerate(sources):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"{what}: sources[{s}] must be a (data, scales) pair, got {type(pair).__name__}")
        check_buffer(pair[0], f"{what}: sources[{s}] data", (data_dtype,), data_numel)
        check_buffer(pair[1], f"{what}: sources[{s}] scales", (torch.float32,), nb)
    data = check_buffer(data, f"{what}: output data", (data_dtype,), data_numel)
    scales = check_buffer(scales, f"{what}: scales", (torch.float32,), nb)
    if residual is not None:
        check_buffer(residual, f"{what}: residual", (torch.float32,), numel)
    if decoded_out is not None:  # may be own itself: each block is read before its decode is written
        check_buffer(decoded_out, f"{what}: decoded_out", (torch.float32,), own.numel())
    optional = [t for t in (own_residual, residual, decoded_out) if t is not None]
    place = place_of([own, data, scales, *optional, *(t for pair in sources for t in pair)], what)
    if place.device >= 0:
        raise ValueError(f"{what}: CPU tensors only (on a GPU, run the codec's decode-accumulate and encode kernels)")
    entry(
        ptr(own),
        own.numel(),
        ptr(own_residual) if own_residual is not None else 0,
        [ptr(pair[0]) for pair in sources],
        [ptr(pair[1]) for pair in sources],
        float(factor),
        numel,
        block,
        ptr(data),
        ptr(scales),
        ptr(residual) if residual is not None else 0,
        stochastic,
        check_seed(seed, what),
        ptr(decoded_out) if decoded_out is not None else 0,
    )
    return data, scales


def kernel(name: str) -> Any:
    return getattr(core(), name)
