"""Elastic updates over many tensors against a flat bucket (EASGD, LSGD and their + variants keep
the centre variable / leader copy flat because it is communicated as one bucket)."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm._validate import check_float
from pycomm.kernels.bucket_update import run_named


def elastic_update(
    tensors: Sequence[torch.Tensor], centre: torch.Tensor, a: float, offsets: Sequence[int] | None = None
) -> None:
    """x_k = (1 - a) x_k + a centre[off_k:] for every tensor (the elastic pull)."""
    a = check_float(a, "elastic_update: a")
    run_named(tensors, (centre, "centre"), None, 1.0 - a, a, 0.0, offsets=offsets, what="elastic_update")


def bucket_lerp(
    tensors: Sequence[torch.Tensor], y: torch.Tensor, z: torch.Tensor, a: float, offsets: Sequence[int] | None = None
) -> None:
    """x_k += a (y[off_k:] - z[off_k:]) for every tensor (e.g. EASGD+/LSGD+'s x += delta)."""
    a = check_float(a, "bucket_lerp: a")
    run_named(tensors, (y, "y"), (z, "z"), 1.0, a, -a, offsets=offsets, what="bucket_lerp")
