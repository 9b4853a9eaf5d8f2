"""Checks of plain Python arguments (ints, floats, bools, strs, timeouts) shared by pycomm's public
functions. Each raises TypeError (wrong type) or ValueError (out of range) whose message starts with
`what` (the function and argument, e.g. "pack: scale") and says what was expected and what came, so
a bad value never reaches the compiled core, where it would be truncated, wrapped or reported as
pybind's "incompatible function arguments"."""

from __future__ import annotations

import math
import numbers

INT64_MAX = (1 << 63) - 1


def check_int(value: object, what: str, *, min_value: int | None = None, max_value: int | None = INT64_MAX) -> int:
    """An int (not a bool; numpy integers are accepted) in [min_value, max_value]."""
    if type(value) is not int:  # the common case first: an ABC isinstance costs about a microsecond
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
        value = int(value)
    if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
        raise ValueError(f"{what} must be an int {_range_text(min_value, max_value)}, got {value}")
    return value


def _range_text(low: int | None, high: int | None) -> str:
    def text(v: int) -> str:
        return "2**63 - 1" if v == INT64_MAX else str(v)

    if low is not None and high is not None:
        return f"in [{text(low)}, {text(high)}]"
    return f">= {text(low)}" if low is not None else f"<= {text(high)}"  # type: ignore[arg-type]


def check_float(value: object, what: str, *, finite: bool = True) -> float:
    """A real number (int or float, not a bool), finite unless `finite` is False (NaN never)."""
    if type(value) is not float and type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{what} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{what} must be a {'finite ' if finite else ''}number, got {value}")
    return value


def check_bool(value: object, what: str) -> bool:
    """True or False (numpy bools too); a truthy str such as 'no' is refused, not read as True."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{what} must be True or False, got {type(value).__name__} {value!r}")


def check_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__} {value!r}")
    return value


def check_timeout(value: object, what: str, *, allow_zero: bool) -> float | None:
    """None (the default), or seconds: > 0 (>= 0 with allow_zero); inf means no limit."""
    if value is None:
        return None
    seconds = check_float(value, what, finite=False)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(
            f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds (or None for the default), got {seconds}"
        )
    return seconds
