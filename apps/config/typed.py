"""A raw configuration mapping -> the typed Config: each value checked against its field's type
(did-you-mean for unknown keys, finite numbers only) and declared range (apps.config.schema.bounded)."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from apps.config.schema import BOUNDS, ConfigError
from apps.name_registry import did_you_mean


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0])
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(
            f"{where}: {value!r} is not one of {list(args)}{did_you_mean(str(value), [str(a) for a in args])}"
        )
    if origin is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        _check_finite(value, where)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):
                raise ConfigError(f"{where}: expected a finite number, got {value!r}")
            return number
    elif tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def _non_finite(value: Any) -> bool:
    """A float that is inf or nan, or a string float() reads as one (an option may be parsed from "inf")."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        try:
            return not math.isfinite(float(value))
        except ValueError:
            return False
    return False


def _check_finite(value: Any, where: str) -> None:
    """Free-form options (algorithm.options, model.options, ...) hold no inf or nan, however deep: no option
    trains to a finite loss with one, and the ranks would only show it as a nan loss."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_finite(item, f"{where}[{i}]")
    elif _non_finite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")


def build(cls: type, raw: Any, where: str = "") -> Any:
    """An instance of the dataclass `cls` from the mapping `raw` (`where`: its dotted key, for errors)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            prefix = f"{where}." if where else ""
            hint = did_you_mean(key, names).replace("'", f"'{prefix}", 1)
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint}; valid keys here: {', '.join(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in raw.items()}
    for f in dataclasses.fields(cls):
        if f.name in kwargs and f.metadata.get("bounds"):
            _check_bounds(
                kwargs[f.name],
                f.metadata["bounds"],
                f"{where}.{f.name}" if where else f.name,
                optional=type(None) in typing.get_args(hints[f.name]),
            )
    return cls(**kwargs)


def _check_bounds(value: Any, bounds: tuple[tuple[str, float], ...], where: str, optional: bool) -> None:
    for i, item in enumerate(value if isinstance(value, list) else [value]):
        for op, limit in bounds:
            if item is not None and not BOUNDS[op](item, limit):
                valid = " and ".join(f"{o} {lim}" for o, lim in bounds)
                key = f"{where}[{i}]" if isinstance(value, list) else where
                raise ConfigError(f"{key} must be {valid}{' (or null)' if optional else ''}, got {item}")
