"""Elastic updates over many tensors against a flat bucket (EASGD, LSGD and their + variants keep
the centre variable / leader copy flat because it is communicated as one bucket)."""
from __future__ import annotations

from typing import Sequence

import torch

from pycomm.kernels.bucket_update import bucket_update


def elastic_update(tensors: Sequence[torch.Tensor], centre: torch.Tensor, a: float,
                   offsets: Sequence[int] | None = None) -> None:
    """x_k = (1 - a) x_k + a centre[off_k:] for every tensor (the elastic pull)."""
    bucket_update(tensors, centre, alpha=1.0 - float(a), beta=float(a), offsets=offsets, what="elastic_update")


def bucket_lerp(tensors: Sequence[torch.Tensor], y: torch.Tensor, z: torch.Tensor, a: float,
                offsets: Sequence[int] | None = None) -> None:
    """x_k += a (y[off_k:] - z[off_k:]) for every tensor (e.g. EASGD+/LSGD+'s x += delta)."""
    bucket_update(tensors, y, alpha=1.0, beta=float(a), z=z, gamma=-float(a), offsets=offsets, what="bucket_lerp")
