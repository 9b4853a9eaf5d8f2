"""The algorithm registry: names -> CommOptimizer subclasses.

An algorithm module registers its class with `@register("name")`; `algorithms/__init__.py` imports the
module (one line) so that the name is known. Another package or branch adds an algorithm the same way
without touching this file or the other algorithms."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

_REGISTRY: dict[str, type] = {}

T = TypeVar("T", bound=type)


def _key(name: str) -> str:
    return name.strip().lower()


def register(name: str) -> Callable[[T], T]:
    """Class decorator: make `cls` selectable as `CommOptimizer(opt, algorithm=name)`."""

    def decorate(cls: T) -> T:
        from algorithms import traits

        traits.check(cls)
        key = _key(name)
        if key in _REGISTRY and _REGISTRY[key] is not cls:
            raise ValueError(f"algorithm name {name!r} is already registered by {_REGISTRY[key].__qualname__}")
        cls.name = key
        _REGISTRY[key] = cls
        return cls

    return decorate


def lookup(name: Any) -> type:
    """The class registered as `name`; a clear ValueError listing the available names otherwise."""
    if not isinstance(name, str):
        raise TypeError(
            f"algorithm must be a string naming an algorithm, got {type(name).__name__}; "
            f"available: {', '.join(sorted(_REGISTRY))}"
        )
    try:
        return _REGISTRY[_key(name)]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None


def available() -> dict[str, dict[str, Any]]:
    """{algorithm name: {option: default}} for every registered algorithm."""
    return {name: cls.default_options() for name, cls in sorted(_REGISTRY.items())}
