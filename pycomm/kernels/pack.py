"""Multi-tensor pack / unpack between many tensors and one flat bucket, with scale and cast."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import ptr
from pycomm._validate import check_float
from pycomm.kernels._segments import segments

WIRE_DTYPES = _dtypes.FLOATING


def pack(
    tensors: Sequence[torch.Tensor], bucket: torch.Tensor, offsets: Sequence[int] | None = None, scale: float = 1.0
) -> torch.Tensor:
    """bucket[offset_k + j] = tensors[k][j] * scale, cast to bucket.dtype, for every tensor; one pass.

    Offsets default to the tensors laid end to end. Returns `bucket`."""
    scale = check_float(scale, "pack: scale")
    place, ptrs, offs, numels, tcode = segments(tensors, bucket, offsets, "pack")
    core().pack(
        ptrs,
        offs,
        numels,
        tcode,
        ptr(bucket),
        bucket.numel(),
        _dtypes.code(bucket.dtype, "pack: bucket"),
        scale,
        place.device,
        place.stream,
    )
    return bucket


def unpack(
    bucket: torch.Tensor, tensors: Sequence[torch.Tensor], offsets: Sequence[int] | None = None, scale: float = 1.0
) -> None:
    """tensors[k][j] = bucket[offset_k + j] * scale, cast to the tensors' dtype; one pass."""
    scale = check_float(scale, "unpack: scale")
    place, ptrs, offs, numels, tcode = segments(tensors, bucket, offsets, "unpack")
    core().unpack(
        ptrs,
        offs,
        numels,
        tcode,
        ptr(bucket),
        bucket.numel(),
        _dtypes.code(bucket.dtype, "unpack: bucket"),
        scale,
        place.device,
        place.stream,
    )
