"""Multi-tensor update from flat buckets, fused with the unpack:

    x_k[j] = alpha * x_k[j] + (beta * y[off_k + j] + gamma * z[off_k + j])     (z optional)

for every tensor x_k at bucket offset off_k, in one pass, without unpacked temporaries. The
averaging apply (averaging_apply.py) and the elastic updates (elastic.py) are this kernel."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import core
from pycomm._tensors import check_tensor, ptr
from pycomm._validate import check_float
from pycomm.kernels._segments import segments

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def bucket_update(
    tensors: Sequence[torch.Tensor],
    y: torch.Tensor,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    z: torch.Tensor | None = None,
    gamma: float = 0.0,
    offsets: Sequence[int] | None = None,
    what: str = "bucket_update",
) -> None:
    """x_k = alpha x_k + (beta y[off_k:] + gamma z[off_k:]) in place for every tensor (one float dtype);
    y and z are flat buckets of one float dtype and length. Offsets default to the tensors end to end."""
    coefficients = [
        check_float(v, f"{what}: {name}") for name, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma))
    ]
    run_named(tensors, (y, "y"), (z, "z") if z is not None else None, *coefficients, offsets=offsets, what=what)


def run_named(
    tensors: Sequence[torch.Tensor],
    y: tuple[torch.Tensor, str],
    z: tuple[torch.Tensor, str] | None,
    alpha: float,
    beta: float,
    gamma: float,
    *,
    offsets: Sequence[int] | None,
    what: str,
) -> None:
    """bucket_update with checked coefficients; y and z come with the caller's names for them, which
    the errors use (averaging_apply's avg and snapshot, elastic_update's centre)."""
    (y, y_name), others = y, []
    check_tensor(y, f"{what}: {y_name}", FLOAT_DTYPES)
    if z is not None:
        z, z_name = z
        check_tensor(z, f"{what}: {z_name}", FLOAT_DTYPES)
        if z.dtype != y.dtype or z.numel() != y.numel():
            raise ValueError(
                f"{what}: {z_name} must have {y_name}'s dtype and length ({y.dtype}[{y.numel()}]), "
                f"got {z.dtype}[{z.numel()}]"
            )
        others = [z]
    place, ptrs, offs, numels, tcode = segments(
        tensors, y, offsets, what, others=others, dtypes=FLOAT_DTYPES, bucket_name=y_name
    )
    core().bucket_update(
        ptrs,
        offs,
        numels,
        tcode,
        ptr(y),
        ptr(z) if z is not None else 0,
        y.numel(),
        _dtypes.code(y.dtype, what),
        alpha,
        beta,
        gamma,
        place.device,
        place.stream,
    )
