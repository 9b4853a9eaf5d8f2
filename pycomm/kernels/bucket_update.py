"""Multi-tensor update from flat buckets, fused with the unpack:

    x_k[j] = alpha * x_k[j] + (beta * y[off_k + j] + gamma * z[off_k + j])     (z optional)

for every tensor x_k at bucket offset off_k, in one pass, without unpacked temporaries. The
averaging apply (averaging.py) and the elastic updates (elastic.py) are this kernel."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, ptr
from pycomm.kernels._segments import segments

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def bucket_update(tensors: Sequence[torch.Tensor], y: torch.Tensor, *, alpha: float = 1.0, beta: float = 1.0,
                  z: torch.Tensor | None = None, gamma: float = 0.0, offsets: Sequence[int] | None = None,
                  what: str = "bucket_update") -> None:
    """x_k = alpha x_k + (beta y[off_k:] + gamma z[off_k:]) in place for every tensor (one float dtype);
    y and z are flat buckets of one float dtype and length. Offsets default to the tensors end to end."""
    check_tensor(y, f"{what}: bucket", FLOAT_DTYPES)
    if z is not None:
        check_tensor(z, f"{what}: second bucket", FLOAT_DTYPES)
        if z.dtype != y.dtype or z.numel() != y.numel():
            raise ValueError(f"{what}: both buckets must have one dtype and length, got {y.dtype}[{y.numel()}] "
                             f"and {z.dtype}[{z.numel()}]")
    for i, t in enumerate(tensors if not isinstance(tensors, torch.Tensor) else ()):
        check_tensor(t, f"{what}: tensors[{i}]", FLOAT_DTYPES)
    place, ptrs, offs, numels, tcode = segments(tensors, y, offsets, what, others=[z] if z is not None else [])
    core().bucket_update(ptrs, offs, numels, tcode, ptr(y), ptr(z) if z is not None else 0, y.numel(),
                         _dtypes.code(y.dtype, what), float(alpha), float(beta), float(gamma), place.device,
                         place.stream)
