"""What every family of bad-argument cases shares: the good tensors, the bad values of each kind of
argument, a Case, and `vary`, which makes one case per (argument, bad value) of a good call."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

import pycomm

N, BLOCK = 300, 256  # tensor size and codec block of the good calls: two blocks, the last short
HOST = "127.0.0.1"


def f32(n: int = N) -> torch.Tensor:
    return torch.randn(n)


# ---- bad values of each kind of argument: (label, factory) ------------------------------------
def _tensor_bad(n: int, dtype: torch.dtype) -> list[tuple[str, Callable[[], Any]]]:
    wrong = torch.int32 if dtype != torch.int32 else torch.float32
    return [
        ("str", lambda: "x"),
        ("None", lambda: None),
        ("list of floats", lambda: [1.0] * n),
        ("wrong dtype", lambda: torch.zeros(n, dtype=wrong)),
        ("non-contiguous", lambda: torch.zeros(2 * n, dtype=dtype)[::2]),
        ("wrong size", lambda: torch.zeros(n + 1, dtype=dtype)),
    ]


BAD_INT_POSITIVE = [
    ("str", "8"),
    ("None", None),
    ("float", 8.0),
    ("bool", True),
    ("negative", -1),
    ("zero", 0),
    ("huge", 2**62),
    ("nan", math.nan),
]
BAD_INT_NONNEGATIVE = [("str", "8"), ("None", None), ("float", 1.5), ("bool", True), ("negative", -5), ("huge", 2**64)]
BAD_FLOAT = [("str", "x"), ("None", None), ("nan", math.nan), ("inf", math.inf), ("list", [1.0])]
BAD_BOOL = [("str", "no"), ("None", None), ("int 2", 2), ("float", 0.5)]
BAD_TIMEOUT = [("str", "1"), ("negative", -1), ("nan", math.nan), ("list", [1])]  # 0 polls, inf waits forever
BAD_TENSORS = [
    ("str", "x"),
    ("None", None),
    ("single tensor", torch.zeros(4)),
    ("list of floats", [1.0, 2.0]),
    ("list with None", [None]),
    ("int tensors", [torch.zeros(4, dtype=torch.int32)]),
    ("non-contiguous", [torch.zeros(8)[::2]]),
]
BAD_OFFSETS = [
    ("float offset", [1.5]),
    ("str offset", ["0"]),
    ("negative offset", [-1]),
    ("huge offset", [2**62]),
    ("not a sequence", 5),
    ("too many", [0, 0]),
    ("bool offset", [True]),
]
BAD_KEY = [("int", 5), ("None", None), ("bytes", b"k"), ("list", ["k"])]
BAD_VALUE = [("int", 5), ("None", None), ("float", 1.5), ("list of ints", [1, 2])]
BAD_INT64 = [("str", "1"), ("None", None), ("float", 1.5), ("bool", True), ("2**63", 2**63), ("-2**63-1", -(2**63) - 1)]
BAD_OP = [("str", "sum"), ("None", None), ("out of range", 7), ("float", 1.0)]
BAD_CODEC = [("unknown name", "int9"), ("int", 5), ("class", pycomm.Int8Codec)]


@dataclass
class Case:
    api: str  # e.g. "kernels.pack"
    arg: str  # the argument replaced (and the name its error must carry)
    label: str  # what the bad value is
    call: Callable[[], Any]  # runs the call with the bad value
    errors: tuple[type[BaseException], ...] = (TypeError, ValueError)  # what counts as a clear error

    @property
    def name(self) -> str:
        return f"{self.api}({self.arg}={self.label})"


def vary(
    api: str, fn: Callable[..., Any], good: Callable[[], dict[str, Any]], bad: dict[str, list[tuple[str, Any]]]
) -> Iterator[Case]:
    """One case per (argument, bad value): fn(**good() with that argument replaced)."""
    for arg, values in bad.items():
        for label, value in values:

            def call(arg=arg, value=value):
                kwargs = good()
                kwargs[arg] = value() if callable(value) and not isinstance(value, type) else value
                return fn(**kwargs)

            yield Case(api, arg, label, call)


def without(values: list[tuple[str, Any]], *labels: str) -> list[tuple[str, Any]]:
    """`values` less those that are fine for this argument."""
    return [v for v in values if v[0] not in labels]


def tensor_arg(n: int, dtype: torch.dtype = torch.float32, optional: bool = False) -> list[tuple[str, Any]]:
    return without(_tensor_bad(n, dtype), "None") if optional else _tensor_bad(n, dtype)


def input_tensor(n: int) -> list[tuple[str, Any]]:
    """Bad values of a tensor whose size sets the others' (any size of it is fine)."""
    return without(_tensor_bad(n, torch.float32), "wrong size")
