"""The layout shared by the multi-tensor kernels: tensor k occupies bucket elements
[offset_k, offset_k + numel_k) of a flat bucket (csrc/kernels/segments.h)."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._tensors import Place, check_tensor, place_of, ptr


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


def segments(tensors: Sequence[torch.Tensor], bucket: torch.Tensor, offsets: Sequence[int] | None, what: str,
             others: Sequence[torch.Tensor] = ()) -> tuple[Place, list[int], list[int], list[int], int]:
    """Checks `tensors` (one dtype) against `bucket` and returns (place, ptrs, offsets, numels,
    tensor dtype code). `others` are further buffers that must share the tensors' device."""
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
    place = place_of([*tensors, bucket, *others], what)
    tensor_dtype = tensors[0].dtype if tensors else bucket.dtype
    return (place, [ptr(t) for t in tensors], [int(o) for o in offsets], [t.numel() for t in tensors],
            _dtypes.code(tensor_dtype, what))
