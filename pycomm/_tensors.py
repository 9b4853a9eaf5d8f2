"""Checks on torch tensors and their translation to raw buffers for pycomm._C.

This is the only place where torch tensors meet the compiled core: everything below it sees
(pointer, element count, dtype code, device ordinal, stream)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from pycomm import _dtypes
from pycomm._build import build_info


@dataclass(frozen=True)
class Place:
    """Where a group of buffers lives: device ordinal (-1 for CPU) and the stream to launch on."""

    device: int
    stream: int


def check_tensor(t: object, what: str, dtypes: Sequence[torch.dtype] | None = None) -> torch.Tensor:
    """`t` must be a contiguous torch tensor (of one of `dtypes` when given)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(
            f"{what}: tensor must be contiguous (call .contiguous() first); got shape "
            f"{tuple(t.shape)} with strides {t.stride()}"
        )
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{what}: dtype {t.dtype} is not supported here; expected one of {names}")
    _dtypes.code(t.dtype, what)
    return t


CPU = Place(-1, 0)


def place_of(tensors: Sequence[torch.Tensor], what: str) -> Place:
    """All tensors on one device; a GPU device needs a GPU build of the same vendor."""
    if len(tensors) == 1 and not tensors[0].is_cuda:  # the common case, on every call: no set to build
        device = tensors[0].device
    else:
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"{what}: all tensors must be on one device, got {sorted(map(str, devices))}")
        device = devices.pop() if devices else torch.device("cpu")
    if device.type == "cpu":
        return CPU
    if device.type != "cuda":
        raise ValueError(f"{what}: tensors on {device.type} are not supported; expected cpu or cuda (ROCm)")
    info = build_info()
    vendor = "hip" if getattr(torch.version, "hip", None) else "cuda"
    if not info[vendor]:
        raise RuntimeError(
            f"{what}: got a tensor on {device}, but this build of pycomm has no "
            f"{vendor.upper()} support (build_info: cuda={info['cuda']}, hip={info['hip']}); "
            f"rebuild with {'hipcc' if vendor == 'hip' else 'nvcc'} available"
        )
    return Place(device.index, current_stream(device.index))


def current_stream(device: int) -> int:
    """The handle of torch's current stream on GPU `device` (0 for the CPU, device -1)."""
    return torch.cuda.current_stream(device).cuda_stream if device >= 0 else 0


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr() if t.numel() else 0
