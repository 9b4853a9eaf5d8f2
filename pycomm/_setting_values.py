"""The kinds of value a PYCOMM_* variable takes (pycomm/settings.py declares which one each takes).

Each kind parses the raw text of the variable (already stripped, never empty: unset and empty mean
the default) and raises ValueError on anything else; `accepted` says in words what it takes, for
the error message and docs/settings.md alike."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Protocol


class ValueKind(Protocol):
    @property
    def accepted(self) -> str: ...

    def parse(self, raw: str) -> Any: ...


def _specials_text(specials: Mapping[Any, str]) -> str:
    return f" ({'; '.join(f'{_number_text(k)}: {v}' for k, v in specials.items())})" if specials else ""


def _number_text(value: float) -> str:
    """1e9 rather than 1e+09 or 1000000000.0; 2**62 rather than its 19 digits."""
    if isinstance(value, int) and value >= 1 << 20 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return f"{value:g}".replace("e+0", "e").replace("e+", "e") if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class _Bounded:
    """A number in [low, high] of `unit`s; `specials` name the values with a meaning. `noun` says
    which kind of number (Integer and Number differ only in it and in how they parse)."""

    noun: ClassVar[str]
    low: float  # an int for Integer
    high: float
    unit: str
    specials: Mapping[Any, str] = field(default_factory=dict)

    @property
    def accepted(self) -> str:
        return (
            f"{self.noun} of {self.unit} from {_number_text(self.low)} to {_number_text(self.high)}"
            f"{_specials_text(self.specials)}"
        )


@dataclass(frozen=True)
class Integer(_Bounded):
    """A whole number (digits only) in [low, high] of `unit`s; `specials` name the values with a meaning."""

    noun: ClassVar[str] = "a whole number"

    def parse(self, raw: str) -> int:
        if not re.fullmatch(r"[0-9]+", raw) or not self.low <= int(raw) <= self.high:
            raise ValueError(raw)
        return int(raw)


@dataclass(frozen=True)
class Number(_Bounded):
    """A finite decimal number in [low, high] of `unit`s."""

    noun: ClassVar[str] = "a number"

    def parse(self, raw: str) -> float:
        if not re.fullmatch(r"[0-9]*\.?[0-9]*(e[+-]?[0-9]+)?", raw, re.IGNORECASE) or raw.startswith(("e", "E")):
            raise ValueError(raw)
        try:
            value = float(raw)
        except ValueError:  # "." alone
            raise ValueError(raw) from None
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise ValueError(raw)
        return value


FLAG_WORDS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True, "off": False, "on": True}


@dataclass(frozen=True)
class Flag:
    """On or off: 0 / 1 (also false / true, no / yes, off / on, in any case)."""

    @property
    def accepted(self) -> str:
        return "0 or 1 (also false/true, no/yes, off/on)"

    def parse(self, raw: str) -> bool:
        try:
            return FLAG_WORDS[raw.lower()]
        except KeyError:
            raise ValueError(raw) from None


@dataclass(frozen=True)
class Choice:
    """One of the words of `values` (word -> the parsed value), case-sensitive as written."""

    values: Mapping[str, Any]

    @property
    def accepted(self) -> str:
        words = [f"`{w}`" for w in self.values]
        return "one of " + ", ".join(words) if len(words) > 2 else " or ".join(words)

    def parse(self, raw: str) -> Any:
        if raw not in self.values:
            raise ValueError(raw)
        return self.values[raw]


@dataclass(frozen=True)
class Pattern:
    """Text matching `regex` (the whole of it), parsed by `convert(match)`; `accepted` describes it."""

    regex: str
    accepted: str
    convert: Any  # Callable[[re.Match], Any]

    def parse(self, raw: str) -> Any:
        match = re.fullmatch(self.regex, raw)
        if match is None:
            raise ValueError(raw)
        return self.convert(match)


@dataclass(frozen=True)
class Text:
    """Any non-empty text (a path, a marker); `accepted` says what it is."""

    accepted: str

    def parse(self, raw: str) -> str:
        return raw


@dataclass(frozen=True)
class Directory:
    """The path of an existing directory (relative paths from the current directory)."""

    what: str

    @property
    def accepted(self) -> str:
        return f"an existing directory ({self.what})"

    def parse(self, raw: str) -> str:
        if not os.path.isdir(raw):
            raise ValueError(raw)
        return raw


@dataclass(frozen=True)
class NewDirectory:
    """The path of a directory to write into: made when missing (its parent must exist)."""

    what: str

    @property
    def accepted(self) -> str:
        return f"a directory, made when missing in an existing parent ({self.what})"

    def parse(self, raw: str) -> str:
        if os.path.exists(raw) and not os.path.isdir(raw) or not os.path.isdir(os.path.dirname(os.path.abspath(raw))):
            raise ValueError(raw)
        return raw


@dataclass(frozen=True)
class FilePath:
    """The path of a file to write (relative paths from the current directory); its directory must exist."""

    what: str

    @property
    def accepted(self) -> str:
        return f"the path of a file in an existing directory ({self.what})"

    def parse(self, raw: str) -> str:
        if os.path.isdir(raw) or not os.path.isdir(os.path.dirname(os.path.abspath(raw))):
            raise ValueError(raw)
        return raw
