"""Axis formatting for apps.plot (and benchmarks.reproduce): log axes of bytes or plain numbers labelled
so that every span, from under a decade to many, gets readable round ticks, and a time unit per span."""

from __future__ import annotations

import math
from typing import Any, Callable

from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter


def _human_bytes(value: float, _pos: Any = None) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def plain_number(value: float, _pos: Any = None) -> str:
    return f"{value / 1e3:g}k" if abs(value) >= 1e4 else f"{value:g}"


class _RoundLocator(MaxNLocator):
    """Evenly spaced round ticks for a log axis spanning less than a decade (positive ones only)."""

    def tick_values(self, vmin: float, vmax: float) -> Any:
        ticks = super().tick_values(vmin, vmax)
        return ticks[ticks > 0]


def log_axis(axis: Any, values: list[float], fmt: Callable[[float, Any], str]) -> None:
    """Log ticks labelled with `fmt`: at powers of ten over many decades, at 1, 2, 5 per decade over
    one or two, and at evenly spaced round values within one (else it would show one tick or none)."""
    lo, hi = min(values), max(values)
    decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 0.0
    if decades < 1:
        axis.set_major_locator(_RoundLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades < 2 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_formatter(NullFormatter())


def bytes_axis(axis: Any, values: list[float]) -> None:
    """A log axis of bytes (positive `values`) labelled in kB / MB / GB (also used by benchmarks.reproduce)."""
    log_axis(axis, values, _human_bytes)


def time_unit(seconds: float) -> tuple[str, float]:
    return ("h", 3600.0) if seconds > 3 * 3600 else ("min", 60.0) if seconds > 300 else ("s", 1.0)
