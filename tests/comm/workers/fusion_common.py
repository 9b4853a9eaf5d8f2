"""Shared by the fusion / quantized / layer-wise averaging workers: the communicator, inputs every rank
can regenerate for any other rank (so each rank computes the reference itself), and raise checks."""

from __future__ import annotations

import re
from typing import Callable

import torch

import pycomm


def world() -> pycomm.Communicator:
    pycomm.init()
    return pycomm.world()


def rank_values(seed: int, rank: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank `rank`'s input for case `seed`: the same on every rank that asks."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype.is_floating_point:
        return (torch.randn(numel, generator=g, dtype=torch.float64) * 3).to(dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=torch.int64).to(dtype)


def expect_raises(exc: type[BaseException], pattern: str, fn: Callable[[], object]) -> None:
    try:
        fn()
    except exc as e:
        assert re.search(pattern, str(e)), f"{exc.__name__} raised, but {str(e)!r} does not match {pattern!r}"
        return
    except Exception as e:  # noqa: BLE001 - report the wrong kind clearly
        raise AssertionError(f"expected {exc.__name__} matching {pattern!r}, got {type(e).__name__}: {e}") from e
    raise AssertionError(f"expected {exc.__name__} matching {pattern!r}, nothing was raised")


def unit_roundoff(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) / 2 if dtype.is_floating_point else 0.0


def bytes_sent() -> float:
    """Bytes this rank has sent so far over all ops, from pycomm.stats() (the nccl-tests bus bytes:
    what each rank puts on the wire)."""
    return float(sum(c["busbw"] * c["seconds"] for c in pycomm.stats().values()))
