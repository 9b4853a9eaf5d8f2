"""What GET /metrics reports: per-stage compute latency and busy time (each micro-batch's meta
carries every stage's compute time back to rank 0), tokens/s over a recent window, micro-batches
in flight; the scheduler adds queue depth and active sequences."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

WINDOW_S = 10.0   # tokens/s is measured over this many recent seconds


class ServeMetrics:
    def __init__(self, stages: list[dict[str, Any]]):
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.stages = [{**s, "microbatches": 0, "busy_s": 0.0, "last_latency_ms": 0.0, "mean_latency_ms": 0.0}
                       for s in stages]
        self.recent: deque[tuple[float, int]] = deque()
        self.tokens_total = 0
        self.in_flight = 0

    def record(self, stage_ns: list[int], rows: int, tokens: int) -> None:
        now = time.monotonic()
        with self.lock:
            for s, ns in zip(self.stages, stage_ns):
                if rows:
                    ms = ns / 1e6
                    s["microbatches"] += 1
                    s["busy_s"] += ns / 1e9
                    s["last_latency_ms"] = ms
                    s["mean_latency_ms"] += (ms - s["mean_latency_ms"]) / s["microbatches"]
            self.tokens_total += tokens
            if tokens:
                self.recent.append((now, tokens))
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - WINDOW_S:
            self.recent.popleft()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            self._trim(now)
            window = min(WINDOW_S, now - self.started) or 1.0
            return {"uptime_s": round(now - self.started, 3),
                    "tokens_total": self.tokens_total,
                    "tokens_per_second": round(sum(n for _, n in self.recent) / window, 3),
                    "microbatches_in_flight": self.in_flight,
                    "stages": [dict(s) for s in self.stages]}
