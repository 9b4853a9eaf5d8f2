"""What GET /metrics reports: per-stage compute latency, busy time and busy fraction (each
micro-batch's meta carries every stage's compute time back to rank 0), tokens/s over a recent
window and per second over the last minute, micro-batches in flight; the scheduler adds queue
depth, active sequences and context restarts."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

WINDOW_S = 10.0  # tokens/s is measured over this many recent seconds
HISTORY_S = 60  # per-second history (the page's chart)
BUSY_WINDOW_S = 5  # a stage's busy fraction: its compute seconds over the last this many whole seconds


class ServeMetrics:
    def __init__(self, stages: list[dict[str, Any]]):
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.stages = [
            {**s, "microbatches": 0, "busy_s": 0.0, "last_latency_ms": 0.0, "mean_latency_ms": 0.0} for s in stages
        ]
        self.recent: deque[tuple[float, int]] = deque()
        # whole seconds since start -> [tokens, busy ns of each stage]
        self.seconds: deque[tuple[int, list[int]]] = deque()
        self.tokens_total = 0
        self.in_flight = 0

    def record(self, stage_ns: list[int], rows: int, tokens: int) -> None:
        now = time.monotonic()
        with self.lock:
            second = self._second(now)
            for i, (s, ns) in enumerate(zip(self.stages, stage_ns)):
                if rows:
                    ms = ns / 1e6
                    s["microbatches"] += 1
                    s["busy_s"] += ns / 1e9
                    s["last_latency_ms"] = ms
                    s["mean_latency_ms"] += (ms - s["mean_latency_ms"]) / s["microbatches"]
                    second[1 + i] += ns
            self.tokens_total += tokens
            second[0] += tokens
            if tokens:
                self.recent.append((now, tokens))
            self._trim(now)

    def _second(self, now: float) -> list[int]:
        sec = int(now - self.started)
        if not self.seconds or self.seconds[-1][0] != sec:
            self.seconds.append((sec, [0] * (1 + len(self.stages))))
        return self.seconds[-1][1]

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - WINDOW_S:
            self.recent.popleft()
        while self.seconds and self.seconds[0][0] < int(now - self.started) - HISTORY_S:
            self.seconds.popleft()

    def _history(self, now: float) -> list[list[int]]:
        """Per whole second of the last HISTORY_S (oldest first, the current partial one left out):
        [tokens, busy ns per stage]."""
        current = int(now - self.started)
        by_second = dict(self.seconds)
        zero = [0] * (1 + len(self.stages))
        return [by_second.get(sec, zero) for sec in range(current - HISTORY_S, current)]

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            self._trim(now)
            window = min(WINDOW_S, now - self.started) or 1.0
            history = self._history(now)
            stages = []
            for i, s in enumerate(self.stages):
                busy_ns = sum(h[1 + i] for h in history[-BUSY_WINDOW_S:])
                stages.append(
                    {
                        **s,
                        "busy_fraction": round(min(1.0, busy_ns / (BUSY_WINDOW_S * 1e9)), 4),
                        "busy_fraction_history": [round(min(1.0, h[1 + i] / 1e9), 4) for h in history],
                    }
                )
            return {
                "uptime_s": round(now - self.started, 3),
                "tokens_total": self.tokens_total,
                "tokens_per_second": round(sum(n for _, n in self.recent) / window, 3),
                "tokens_per_second_history": [h[0] for h in history],
                "history_s": HISTORY_S,
                "microbatches_in_flight": self.in_flight,
                "stages": stages,
            }
