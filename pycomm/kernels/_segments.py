"""The layout shared by the multi-tensor kernels: tensor k occupies bucket elements
[offset_k, offset_k + numel_k) of a flat bucket (csrc/kernels/segments.h)."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._tensors import Place, check_tensor, current_stream, place_of, ptr
from pycomm._validate import check_int
from pycomm.kernels._layout_cache import LayoutCache, fingerprint

LAYOUTS = LayoutCache()  # validated layouts of segments(), shared by every multi-tensor kernel


def bucket_offsets(tensors: Sequence[torch.Tensor], align: int = 1) -> tuple[list[int], int]:
    """Consecutive offsets of `tensors` in a flat bucket, each rounded up to `align` elements,
    and the bucket's total length."""
    align = check_int(align, "bucket_offsets: align", min_value=1)
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, Sequence):
        raise TypeError(f"bucket_offsets: tensors must be a sequence of tensors, got {type(tensors).__name__}")
    offsets, pos = [], 0
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"bucket_offsets: tensors[{i}]: expected a torch.Tensor, got {type(t).__name__}")
        offsets.append(pos)
        pos += -(-t.numel() // align) * align
    return offsets, pos


def segments(
    tensors: Sequence[torch.Tensor],
    bucket: torch.Tensor,
    offsets: Sequence[int] | None,
    what: str,
    others: Sequence[torch.Tensor] = (),
    dtypes: Sequence[torch.dtype] | None = None,
    bucket_name: str = "bucket",
) -> tuple[Place, Sequence[int], Sequence[int], Sequence[int], int]:
    """Checks `tensors` (one dtype, of `dtypes` when given) against `bucket` (likewise; the caller
    calls it `bucket_name`) and returns (place, ptrs, offsets, numels, tensor dtype code). `others`
    must share the tensors' device. Validated layouts are cached on the fingerprint of everything
    checked (_layout_cache.py)."""
    if isinstance(tensors, torch.Tensor):
        raise TypeError(f"{what}: tensors must be a sequence of tensors, got a single tensor")
    if not isinstance(tensors, (list, tuple)):
        try:
            tensors = list(tensors)  # a generator would be used up by the fingerprint
        except TypeError:
            raise TypeError(f"{what}: tensors must be a sequence of tensors, got {type(tensors).__name__}") from None
    tensor_key, bucket_key = fingerprint(tensors), fingerprint([bucket, *others])
    try:
        # with the types: 1.0 and True hash as 1, and must not hit a layout validated for offset 1
        offsets_key = None if offsets is None else (tuple(offsets), tuple(map(type, offsets)))
    except TypeError:
        offsets_key = tensor_key = None  # not a sequence: validation says so
    key = (
        None
        if tensor_key is None or bucket_key is None
        else (tensor_key, bucket_key, offsets_key, None if dtypes is None else tuple(dtypes))
    )
    device, ptrs, offs, numels, tcode = LAYOUTS.get(
        key, lambda: _validate(tensors, bucket, offsets, what, others, dtypes, bucket_name)
    )
    return Place(device, current_stream(device)), ptrs, offs, numels, tcode


def _validate(
    tensors: Sequence[torch.Tensor],
    bucket: torch.Tensor,
    offsets: Sequence[int] | None,
    what: str,
    others: Sequence[torch.Tensor],
    dtypes: Sequence[torch.dtype] | None,
    bucket_name: str,
) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """The uncached checks of segments(); returns (device, ptrs, offsets, numels, dtype code)."""
    tensors = [check_tensor(t, f"{what}: tensors[{i}]", dtypes) for i, t in enumerate(tensors)]
    check_tensor(bucket, f"{what}: {bucket_name}", dtypes)
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise TypeError(
            f"{what}: all tensors must share one dtype (group them by dtype), got {sorted(str(d) for d in dtypes)}"
        )
    if offsets is None:
        offsets, total = bucket_offsets(tensors)
        if total > bucket.numel():
            raise ValueError(f"{what}: {bucket_name} has {bucket.numel()} elements, the tensors need {total}")
    else:
        offsets = _check_offsets(offsets, tensors, bucket.numel(), what, bucket_name)
    place = place_of([*tensors, bucket, *others], what)
    tensor_dtype = tensors[0].dtype if tensors else bucket.dtype
    return (
        place.device,
        tuple(ptr(t) for t in tensors),
        tuple(offsets),
        tuple(t.numel() for t in tensors),
        _dtypes.code(tensor_dtype, what),
    )


def _check_offsets(
    offsets: object, tensors: Sequence[torch.Tensor], bucket_numel: int, what: str, bucket_name: str
) -> list[int]:
    """One int offset >= 0 per tensor, each tensor inside the bucket (never truncated: 1.5 is refused)."""
    if isinstance(offsets, (str, bytes, torch.Tensor)) or not isinstance(offsets, Sequence):
        raise TypeError(
            f"{what}: offsets must be a list of ints (one per tensor) or None, got {type(offsets).__name__}"
        )
    if len(offsets) != len(tensors):
        raise ValueError(f"{what}: got {len(offsets)} offsets for {len(tensors)} tensors")
    checked = [check_int(o, f"{what}: offsets[{k}]", min_value=0) for k, o in enumerate(offsets)]
    for k, (o, t) in enumerate(zip(checked, tensors)):
        if o + t.numel() > bucket_numel:
            raise ValueError(
                f"{what}: offsets[{k}] = {o}: tensors[{k}] of {t.numel()} elements does not fit in "
                f"a bucket of {bucket_numel} elements ({bucket_name})"
            )
    return checked
