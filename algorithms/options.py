"""Validation of algorithm options: every bad value raises naming the option and what was expected."""

from __future__ import annotations

import numbers
from typing import Any, Mapping

import pycomm


class OptionError(ValueError):
    """An algorithm option with a bad name or value."""


def merge(algorithm: str, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `given`; an unknown option name raises listing the valid ones."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise OptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"for algorithm {algorithm!r}; valid options: {', '.join(sorted(defaults))}"
        )
    return {**defaults, **given}


def integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise OptionError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def optional_integer(name: str, value: Any, minimum: int) -> int | None:
    return None if value is None else integer(name, value, minimum)


def number(name: str, value: Any, minimum: float = float("-inf"), maximum: float = float("inf")) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError(f"{name} must be a number, got {value!r}")
    if not (minimum <= value <= maximum):
        raise OptionError(f"{name} must be in [{minimum}, {maximum}], got {value}")
    return float(value)


def fraction(name: str, value: Any) -> float:
    """A pulling strength: a number in [0, 1]."""
    return number(name, value, 0.0, 1.0)


def choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise OptionError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"{name} must be True or False, got {value!r}")
    return value


def codec(value: Any) -> Any:
    """None, a pycomm codec instance, or a codec name (pycomm.codecs.CODEC_NAMES: "int8", "int4", "1bit", ...)."""
    if value is None:
        return None
    try:
        return pycomm.codecs.resolve_codec(value, "codec")
    except ValueError as e:
        raise OptionError(str(e)) from None
    except TypeError:
        raise OptionError(
            f"codec must be None, a codec name ({', '.join(map(repr, pycomm.codecs.CODEC_NAMES))}) "
            f"or a pycomm codec instance, got {type(value).__name__}"
        ) from None
