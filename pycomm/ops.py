"""Reduce ops (pycomm.SUM, AVG, MAX, MIN). Their values are the codes of csrc/common/transport.h."""

from __future__ import annotations

import enum


class ReduceOp(enum.IntEnum):
    SUM = 0
    AVG = 1  # SUM, then scaled by 1/size (floating dtypes only)
    MAX = 2
    MIN = 3


SUM = ReduceOp.SUM
AVG = ReduceOp.AVG
MAX = ReduceOp.MAX
MIN = ReduceOp.MIN


def check_op(op: object, what: str) -> ReduceOp:
    """`op` as a ReduceOp; ValueError naming `what` when it is none of SUM, AVG, MAX, MIN."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, int) and not isinstance(op, bool) and op in ReduceOp._value2member_map_:
        return ReduceOp(op)
    raise ValueError(f"{what}: op must be one of pycomm.SUM, pycomm.AVG, pycomm.MAX, pycomm.MIN; got {op!r}")
