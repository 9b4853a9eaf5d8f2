"""Name -> factory registries with option checking that suggests the closest valid name (difflib)."""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

T = TypeVar("T")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown(what: str, word: str, choices: Iterable[str]) -> ValueError:
    choices = sorted(choices)
    return ValueError(f"unknown {what} '{word}'{did_you_mean(word, choices)}; valid: {', '.join(choices)}")


@dataclass(frozen=True)
class Entry(Generic[T]):
    factory: Callable[..., T]
    meta: Mapping[str, Any]

    def parameters(self) -> dict[str, inspect.Parameter]:
        return {
            k: p
            for k, p in inspect.signature(self.factory).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def add(self, name: str, factory: Callable[..., T], **meta: Any) -> None:
        self._entries[name] = Entry(factory, meta)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Entry[T]:
        if name not in self._entries:
            raise unknown(self.kind, name, self._entries)
        return self._entries[name]

    def check_options(self, name: str, options: Mapping[str, Any], where: str) -> None:
        """Raise on an option the factory does not take, naming the closest one it does."""
        entry = self.get(name)
        valid = entry.parameters()
        for key in options:
            if key not in valid:
                raise unknown(f"{where} key (for {self.kind} '{name}')", key, valid)
        rule = entry.meta.get("check")  # the values' own rules (apps.option_rules), with the defaults filled in
        if rule is not None:
            rule({**self.defaults(name), **options}, where)

    def defaults(self, name: str) -> dict[str, Any]:
        """The factory's parameters that have a default, with it."""
        return {k: p.default for k, p in self.get(name).parameters().items() if p.default is not p.empty}

    def build(self, name: str, options: Mapping[str, Any], defaults: Mapping[str, Any] = {}) -> T:
        """Call the factory with options; `defaults` (e.g. sizes read from the data) fill parameters
        the factory takes and the user did not set."""
        entry = self.get(name)
        valid = entry.parameters()
        kwargs = {k: v for k, v in defaults.items() if k in valid}
        kwargs.update(options)
        return entry.factory(**kwargs)
