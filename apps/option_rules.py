"""Rules on a model's or a dataset's option values, checked before any rank starts (the registries'
`check` meta, run by Registry.check_options): each error names the key, the value and what is expected,
where the ranks would have raised deep inside a constructor without naming the key, or trained wrong
(a dropout of 1.5)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

Rule = Callable[[Mapping[str, Any], str], None]  # (the options with the factory's defaults, "model.options")


class OptionValueError(ValueError):
    """An option value the model or dataset cannot take; the message names it and what is expected."""


def whole(*keys: str, minimum: int = 1) -> Rule:
    """Each of `keys` (when not None) is a whole number >= minimum."""

    def rule(values: Mapping[str, Any], where: str) -> None:
        for key in keys:
            value = values.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise OptionValueError(f"{where}.{key}={value!r}: expected a whole number >= {minimum}")

    return rule


def fraction(key: str) -> Rule:
    """`key` is a probability of dropping, in [0, 1) (1 would drop everything)."""

    def rule(values: Mapping[str, Any], where: str) -> None:
        value = values.get(key)
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise OptionValueError(f"{where}.{key}={value!r}: expected a number >= 0 and < 1")

    return rule


def divides(heads: str, width: str) -> Rule:
    """The attention's `heads` divide its `width` (each head takes width / heads of it)."""

    def rule(values: Mapping[str, Any], where: str) -> None:
        h, w = values.get(heads), values.get(width)
        if isinstance(h, int) and isinstance(w, int) and h > 0 and w % h:
            raise OptionValueError(
                f"{where}.{heads}={h} does not divide {where}.{width}={w}: each attention head "
                f"takes {width} / {heads} of the width; choose {heads} among "
                f"{[d for d in range(1, w + 1) if w % d == 0]}, or a multiple of {h} for {width}"
            )

    return rule


def all_of(*rules: Rule) -> Rule:
    def rule(values: Mapping[str, Any], where: str) -> None:
        for r in rules:
            r(values, where)

    return rule
