"""One log line per kind of message per interval: a flood of connections that all fail the same way
(the process out of file descriptors, slow clients timed out, connections refused over the limit)
would otherwise write a line each, hundreds of thousands a minute. A kind is the logger, the
message's format string and the exception's type; the first of a kind in an interval is logged, the
others counted, and the next one logged says how many were left out."""

from __future__ import annotations

import logging
import threading
import time

INTERVAL_S = 10.0
# the loggers a flood of connections writes to: uvicorn's, and asyncio's (a failed accept())
LOGGERS = ("uvicorn.error", "uvicorn.access", "asyncio")


class RateLimit(logging.Filter):
    def __init__(self, interval_s: float = INTERVAL_S):
        super().__init__()
        self.interval_s = interval_s
        self.last: dict[tuple, float] = {}
        self.dropped: dict[tuple, int] = {}
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        kind = (record.name, str(record.msg), exc)
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(kind, -self.interval_s) < self.interval_s:
                self.dropped[kind] = self.dropped.get(kind, 0) + 1
                return False
            self.last[kind] = now
            dropped = self.dropped.pop(kind, 0)
        if dropped:
            record.msg = f"{record.msg} (and {dropped} more like it in the last {self.interval_s:g} s, not logged)"
        return True


def install(interval_s: float = INTERVAL_S) -> RateLimit:
    """Puts one RateLimit on each of LOGGERS (a logger's filter sees the records made on it)."""
    limit = RateLimit(interval_s)
    for name in LOGGERS:
        logging.getLogger(name).addFilter(limit)
    return limit
