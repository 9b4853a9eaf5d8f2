"""Checks of the single-buffer kernels (quantize, sign compression): each buffer is a contiguous
tensor of an expected dtype and element count; outputs the caller leaves out are allocated."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm._tensors import check_tensor

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_block(block: int, what: str, multiple: int = 1) -> int:
    if isinstance(block, bool) or not isinstance(block, int) or block < multiple or block % multiple:
        need = f"a positive multiple of {multiple}" if multiple > 1 else "a positive int"
        raise ValueError(f"{what}: block must be {need}, got {block!r}")
    return block


def num_blocks(numel: int, block: int) -> int:
    """How many scales a tensor of `numel` elements has with blocks of `block` (the last may be short)."""
    return -(-numel // block)


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
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ValueError(f"{what}: seed must be an int in [0, 2**64), got {seed!r}")
    return seed
