"""The one-release shim for Communicator defaults that changed to one convention, torch.distributed's:
every reducing op defaults to op=SUM, every op to async_op=False. A call that gives neither keeps its old
behaviour (op AVG; a Work from the compound ops) and warns once per call site with a FutureWarning naming
the new default; passing the argument explicitly silences it. Remove after one release."""
from __future__ import annotations

import warnings
from typing import Any

from pycomm.ops import AVG, ReduceOp


class _OldDefault:
    """A parameter's default while it is deprecated: its repr says what the call still gets."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


# Typed Any so that they stand in signatures for ReduceOp / bool defaults.
OLD_AVG: Any = _OldDefault("AVG (deprecated default; pass op=)")
OLD_ASYNC: Any = _OldDefault("True (deprecated default; pass async_op=)")


def op_or_old(op: Any, what: str) -> ReduceOp:
    """`op`, or AVG with a FutureWarning where the caller gave none."""
    if op is OLD_AVG:
        warnings.warn(f"{what}: called without op=; the default changes from pycomm.AVG to pycomm.SUM (as in "
                      f"torch.distributed) in the next release, and this call still averages. Pass op=pycomm.AVG "
                      f"(or op=pycomm.SUM) to silence this warning.", FutureWarning, stacklevel=3)
        return AVG
    return op


def async_or_old(async_op: Any, what: str) -> Any:
    """`async_op`, or True with a FutureWarning where the caller gave none."""
    if async_op is OLD_ASYNC:
        warnings.warn(f"{what}: called without async_op=; the default changes to async_op=False (blocking, returns "
                      f"None, as every other op) in the next release, and this call still returns a Work. Pass "
                      f"async_op=True (and wait on the Work) or async_op=False to silence this warning.",
                      FutureWarning, stacklevel=3)
        return True
    return async_op
