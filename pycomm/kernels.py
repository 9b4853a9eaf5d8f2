"""Python entry points of the compiled kernels (CPU always; CUDA or HIP when built).

Every function takes torch tensors, checks them, and hands raw buffers to pycomm._C. GPU kernels
are launched on the current stream of the tensors' device and do not synchronize the host."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, place_of, ptr

WIRE_DTYPES = _dtypes.FLOATING


def bucket_offsets(tensors: Sequence[torch.Tensor], align: int = 1) -> tuple[list[int], int]:
    """Consecutive offsets of `tensors` in a flat bucket, each rounded up to `align` elements,
    and the bucket's total length."""
    if align < 1:
        raise ValueError(f"align must be >= 1, got {align}")
    offsets, pos = [], 0
    for t in tensors:
        offsets.append(pos)
        pos += -(-t.numel() // align) * align
    return offsets, pos


def _segments(tensors: Sequence[torch.Tensor], bucket: torch.Tensor, offsets: Sequence[int] | None,
              what: str):
    if isinstance(tensors, torch.Tensor):
        raise TypeError(f"{what}: tensors must be a sequence of tensors, got a single tensor")
    tensors = [check_tensor(t, f"{what}: tensors[{i}]") for i, t in enumerate(tensors)]
    check_tensor(bucket, f"{what}: bucket")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise TypeError(f"{what}: all tensors must share one dtype (group them by dtype), got "
                        f"{sorted(str(d) for d in dtypes)}")
    if offsets is None:
        offsets, total = bucket_offsets(tensors)
        if total > bucket.numel():
            raise ValueError(f"{what}: bucket has {bucket.numel()} elements, the tensors need {total}")
    elif len(offsets) != len(tensors):
        raise ValueError(f"{what}: got {len(offsets)} offsets for {len(tensors)} tensors")
    place = place_of([*tensors, bucket], what)
    tensor_dtype = tensors[0].dtype if tensors else bucket.dtype
    return (place, [ptr(t) for t in tensors], [int(o) for o in offsets], [t.numel() for t in tensors],
            _dtypes.code(tensor_dtype, what))


def pack(tensors: Sequence[torch.Tensor], bucket: torch.Tensor, offsets: Sequence[int] | None = None,
         scale: float = 1.0) -> torch.Tensor:
    """bucket[offset_k + j] = tensors[k][j] * scale, cast to bucket.dtype, for every tensor; one pass.

    Offsets default to the tensors laid end to end. Returns `bucket`."""
    place, ptrs, offs, numels, tcode = _segments(tensors, bucket, offsets, "pack")
    core().pack(ptrs, offs, numels, tcode, ptr(bucket), bucket.numel(), _dtypes.code(bucket.dtype, "pack: bucket"),
                float(scale), place.device, place.stream)
    return bucket


def unpack(bucket: torch.Tensor, tensors: Sequence[torch.Tensor], offsets: Sequence[int] | None = None,
           scale: float = 1.0) -> None:
    """tensors[k][j] = bucket[offset_k + j] * scale, cast to the tensors' dtype; one pass."""
    place, ptrs, offs, numels, tcode = _segments(tensors, bucket, offsets, "unpack")
    core().unpack(ptrs, offs, numels, tcode, ptr(bucket), bucket.numel(),
                  _dtypes.code(bucket.dtype, "unpack: bucket"), float(scale), place.device, place.stream)
