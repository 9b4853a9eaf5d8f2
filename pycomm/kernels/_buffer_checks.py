"""Checks of the single-buffer kernels (quantize, sign compression): each buffer is a contiguous
tensor of an expected dtype and element count; outputs the caller leaves out are allocated."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._tensors import check_tensor, place_of, ptr
from pycomm._validate import check_int

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# Larger blocks only mean "one block": capping them keeps block arithmetic far from int64 overflow.
MAX_BLOCK = 1 << 31


def check_block(block: int, what: str, multiple: int = 1) -> int:
    check_int(block, f"{what}: block", min_value=None, max_value=None)
    if not multiple <= block <= MAX_BLOCK or block % multiple:
        need = f"a positive multiple of {multiple}" if multiple > 1 else "a positive int"
        raise ValueError(f"{what}: block must be {need}, at most 2**31, got {block!r}")
    return int(block)


def check_numel(numel: int, what: str) -> int:
    """An element count: an int >= 0."""
    return check_int(numel, f"{what}: numel", min_value=0)


def num_blocks(numel: int, block: int) -> int:
    """How many scales a tensor of `numel` elements has with blocks of `block` (the last may be short)."""
    return -(-check_numel(numel, "num_blocks") // check_block(block, "num_blocks"))


def check_buffer(t: object, what: str, dtypes: Sequence[torch.dtype], numel: int) -> torch.Tensor:
    """`t` is a contiguous tensor of one of `dtypes` with exactly `numel` elements."""
    t = check_tensor(t, what, dtypes)
    if t.numel() != numel:
        raise ValueError(f"{what}: expected {numel} elements, got {t.numel()} (shape {tuple(t.shape)})")
    return t


def output(t: torch.Tensor | None, what: str, dtype: torch.dtype, numel: int, like: torch.Tensor) -> torch.Tensor:
    """The caller's output buffer, checked, or a new one on `like`'s device."""
    if t is None:
        return torch.empty(numel, dtype=dtype, device=like.device)
    return check_buffer(t, what, (dtype,), numel)


def check_seed(seed: int, what: str) -> int:
    check_int(seed, f"{what}: seed", min_value=None, max_value=None)
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"{what}: seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def decode_call(
    entry,
    data: torch.Tensor,
    scales: torch.Tensor,
    out: torch.Tensor,
    *,
    block: int,
    accumulate: bool,
    data_dtype: torch.dtype,
    data_numel: int,
    block_multiple: int,
    what: str,
    out_name: str = "out",
    data_name: str | None = None,
) -> torch.Tensor:
    """Checks and runs a blockwise decode kernel `entry` of pycomm._C: out (+)= decode(data, scales);
    `out_name` and `data_name` are the caller's names for `out` (e.g. "acc") and `data` (default: q for
    int8 levels, bits otherwise)."""
    check_block(block, what, multiple=block_multiple)
    out = check_tensor(out, f"{what}: {out_name}", FLOAT_DTYPES)
    n = out.numel()
    data_name = data_name or ("q" if data_dtype == torch.int8 else "bits")
    check_buffer(data, f"{what}: {data_name}", (data_dtype,), data_numel)
    check_buffer(scales, f"{what}: scales", (torch.float32,), num_blocks(n, block))
    place = place_of([data, scales, out], what)
    entry(
        ptr(data),
        ptr(scales),
        n,
        block,
        ptr(out),
        _dtypes.code(out.dtype, what),
        accumulate,
        place.device,
        place.stream,
    )
    return out
