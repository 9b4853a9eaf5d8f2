"""The settings every rank must share (those pycomm/settings.py marks `agreed`: PYCOMM_INLINE_BYTES,
PYCOMM_QUANTIZED_SEGMENT, PYCOMM_DEBUG, ...), compared when a communicator is made.

A rank whose value differs would pick other MPI calls, other segments or other op checks than its
peers and hang or mismatch in some later op; instead every rank raises SettingError at the
communicator's creation, naming the variable and both values. Each value travels as one integer
through the transport's `gather_at_creation` (MPI: one MPI_Allgather on the communicator's private
op-matching duplicate; gloo: on its process group), outside the op queue and the stats, the way
`comm.oversubscribed` is agreed (csrc/transport/mpi/mpi_transport.cc). The NCCL transport has no such
channel: an NCCL world bootstrapped over MPI is checked on that MPI communicator, other NCCL
communicators are not."""

from __future__ import annotations

from typing import Any, Optional

from pycomm import settings
from pycomm.errors import SettingError
from pycomm.settings import Choice, Flag, Setting

UNSET = -1  # the value of a setting left unset (its default): Integer and Flag values are never negative


def encoded(s: Setting, value: Any) -> int:
    """`value` of setting `s` as the integer every rank sends."""
    if value is None:
        return UNSET
    if isinstance(s.kind, Choice):
        return list(s.kind.values.values()).index(value)
    return int(value)


def described(s: Setting, code: int) -> str:
    """How a rank's integer for `s` reads in the error: its value, as the variable would be written."""
    if code == UNSET:
        return f"it unset (default {s.default_words})"
    if isinstance(s.kind, Choice):
        return f"{s.name}={list(s.kind.values)[code]}"
    return f"{s.name}={code}" if not isinstance(s.kind, Flag) else f"{s.name}={'1' if code else '0'}"


def agreed_settings() -> list[Setting]:
    return [s for s in settings.TABLES[settings.TABLE] if s.agreed]


def disagreement(agreed: list[Setting], table: list[int], size: int) -> Optional[str]:
    """The error for the first setting whose values differ in `table` (every rank's integers, rank by
    rank), or None where all agree."""
    n = len(agreed)
    for i, s in enumerate(agreed):
        column = [table[r * n + i] for r in range(size)]
        other = next((r for r, v in enumerate(column) if v != column[0]), None)
        if other is not None:
            return (
                f"{s.name} must be the same on every rank of a communicator, but rank 0 has "
                f"{described(s, column[0])} and rank {other} has {described(s, column[other])}; set it alike "
                f"for every rank (mpirun -x {s.name}=..., or in the job script before srun)"
            )
    return None


def check(transport: Any) -> None:
    """Raises SettingError on every rank of the new `transport` when the ranks' agreed settings differ.
    Collective over it; nothing on one rank or where the transport cannot gather (NCCL)."""
    agreed = agreed_settings()
    if transport.size == 1 or not agreed:
        return
    table = transport.gather_at_creation([encoded(s, settings.get(s.name)) for s in agreed])
    if table is None:
        return
    error = disagreement(agreed, list(table), transport.size)
    if error is not None:
        raise SettingError(error)
