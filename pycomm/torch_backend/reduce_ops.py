"""torch.distributed's reduce ops on pycomm: SUM, AVG, MIN, MAX are pycomm's own; PRODUCT, BAND, BOR and
BXOR run as an all-gather through pycomm followed by the reduction on every rank (pycomm's core has no
such reduction; the result is the same on every rank). Others (PREMUL_SUM) raise naming the op."""

from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.distributed as dist

from pycomm.ops import ReduceOp

_NATIVE = {
    dist.ReduceOp.SUM: ReduceOp.SUM,
    dist.ReduceOp.AVG: ReduceOp.AVG,
    dist.ReduceOp.MIN: ReduceOp.MIN,
    dist.ReduceOp.MAX: ReduceOp.MAX,
}
_GATHERED: dict[object, Callable[[torch.Tensor], torch.Tensor]] = {
    dist.ReduceOp.PRODUCT: lambda rows: torch.prod(rows, dim=0, dtype=rows.dtype),
    dist.ReduceOp.BAND: lambda rows: functools.reduce(torch.bitwise_and, rows.unbind(0)),
    dist.ReduceOp.BOR: lambda rows: functools.reduce(torch.bitwise_or, rows.unbind(0)),
    dist.ReduceOp.BXOR: lambda rows: functools.reduce(torch.bitwise_xor, rows.unbind(0)),
}
_BITWISE = (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)


def _find(op: object, table: dict) -> Optional[object]:
    for key in table:
        if op == key:  # torch's ReduceOp compares by kind (a PREMUL_SUM carries a factor too)
            return key
    return None


def name_of(op: object) -> str:
    kind = getattr(op, "op", op)
    return str(getattr(kind, "name", kind))


def native(op: object) -> Optional[ReduceOp]:
    """pycomm's op for torch's `op`, or None when pycomm's core has none."""
    key = _find(op, _NATIVE)
    return None if key is None else _NATIVE[key]


def gathered(op: object, dtype: torch.dtype, what: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The local reduction over gathered rows [size, numel] for `op`; a clear error where there is none."""
    key = _find(op, _GATHERED)
    if key is None:
        raise NotImplementedError(
            f"pycomm backend: {what} with reduce op {name_of(op)} is not supported; it supports "
            f"SUM, AVG, MIN, MAX, PRODUCT, BAND, BOR, BXOR"
        )
    if key in _BITWISE and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(
            f"pycomm backend: {what} with reduce op {name_of(op)} needs an integer or bool tensor, got {dtype}"
        )
    return _GATHERED[key]
