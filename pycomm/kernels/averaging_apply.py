"""The averaging apply of non-blocking (layer-wise) averaging, fused with the unpack: while the
all-reduce of a snapshot ran, the tensors moved on locally; adding avg - snapshot keeps those
local updates and moves the tensors by what averaging changed."""

from __future__ import annotations

from typing import Sequence

import torch

from pycomm.kernels.bucket_update import run_named


def averaging_apply(
    tensors: Sequence[torch.Tensor], avg: torch.Tensor, snapshot: torch.Tensor, offsets: Sequence[int] | None = None
) -> None:
    """x_k += avg[off_k:] - snapshot[off_k:] for every tensor, computed as x + (avg - snapshot) in
    fp32 (fp64 for fp64 tensors). avg and snapshot are flat buckets of one dtype and length."""
    # snapshot is required: without it the update would silently be x += avg
    run_named(tensors, (avg, "avg"), (snapshot, "snapshot"), 1.0, 1.0, -1.0, offsets=offsets, what="averaging_apply")
