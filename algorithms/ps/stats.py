"""What the fault-tolerant algorithms report: staleness seen (mean, max, histogram), rejected pushes,
bytes pushed and pulled, the server's queue depth; totals since construction and per step."""

from __future__ import annotations

from collections import Counter
from typing import Any


class StalenessStats:
    def __init__(self) -> None:
        self.count = self.total = self.max = self.rejected = 0
        self.pushed = self.pulled = 0
        self.seconds = 0.0
        self.calls = 0
        self.histogram: Counter[int] = Counter()
        self.queue_depth = 0
        self._mark: dict[str, Any] = self._snapshot()

    def staleness(self, s: int) -> None:
        self.count += 1
        self.total += s
        self.max = max(self.max, s)
        self.histogram[s] += 1

    def _snapshot(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "total": self.total,
            "rejected": self.rejected,
            "pushed": self.pushed,
            "pulled": self.pulled,
            "histogram": Counter(self.histogram),
        }

    def as_dict(self) -> dict[str, Any]:
        """Totals since construction, and `step_metrics`: what changed since the previous call (a step's
        worth when called once per step, as apps do)."""
        mark, now = self._mark, self._snapshot()
        self._mark = now
        n = now["count"] - mark["count"]
        hist = now["histogram"] - mark["histogram"]
        step = {
            "staleness_mean": (now["total"] - mark["total"]) / n if n else None,
            "staleness_max": max(hist) if hist else None,
            "staleness_hist": {str(k): v for k, v in sorted(hist.items())},
            "rejected": now["rejected"] - mark["rejected"],
            "bytes_pushed": now["pushed"] - mark["pushed"],
            "bytes_pulled": now["pulled"] - mark["pulled"],
            "queue_depth": self.queue_depth,
        }
        return {
            "bytes": self.pushed + self.pulled,
            "seconds": self.seconds,
            "calls": self.calls,
            "bytes_pushed": self.pushed,
            "bytes_pulled": self.pulled,
            "max_staleness": self.max,
            "mean_staleness": self.total / self.count if self.count else 0.0,
            "rejected": self.rejected,
            "staleness_histogram": {str(k): v for k, v in sorted(self.histogram.items())},
            "step_metrics": step,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "total": self.total,
            "max": self.max,
            "rejected": self.rejected,
            "pushed": self.pushed,
            "pulled": self.pulled,
            "histogram": dict(self.histogram),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.total, self.max = state["count"], state["total"], state["max"]
        self.rejected, self.pushed, self.pulled = state["rejected"], state["pushed"], state["pulled"]
        self.histogram = Counter({int(k): v for k, v in state["histogram"].items()})
        self._mark = self._snapshot()
