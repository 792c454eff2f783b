"""Rate limits on every logger the server writes to, so no client can grow the log.

`LogBudget` is a `logging.Filter`: a token bucket of ``burst`` records refilled at
``rate`` records a second; what it drops is counted and the next record that passes
says how many went. A traceback is kept the first time a message is logged in
``interval`` seconds and left off its repeats (asyncio logs one per failed accept,
and a traceback is most of a record's bytes). `limit_server_logs` puts one on each
of the server's loggers: ``riftco.serve``, ``uvicorn``, ``uvicorn.error``,
``uvicorn.access`` and ``asyncio``.
"""

from __future__ import annotations

import logging
import time

SERVER_LOGGERS = ("riftco.serve", "uvicorn", "uvicorn.error", "uvicorn.access", "asyncio")


class LogBudget(logging.Filter):
    """At most ``burst`` records at once and ``rate`` a second on average; repeated
    tracebacks at most once per ``interval`` seconds for the same message."""

    def __init__(self, rate: float, burst: int, interval: float) -> None:
        super().__init__()
        self.rate = rate
        self.burst = burst
        self.interval = interval
        self.tokens = float(burst)
        self.stamp = time.monotonic()
        self.dropped = 0
        self.dropped_total = 0
        self._tracebacks: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            self.dropped += 1
            self.dropped_total += 1
            return False
        self.tokens -= 1.0
        if record.exc_info or record.exc_text:
            lines = str(record.msg).splitlines()
            key = f"{record.name}:{lines[0][:120] if lines else ''}"
            if now - self._tracebacks.get(key, -float("inf")) < self.interval:
                record.exc_info = None
                record.exc_text = None
                record.msg = f"{record.msg} (traceback as logged earlier)"
            else:
                self._tracebacks[key] = now
                if len(self._tracebacks) > 256:  # distinct messages are bounded too
                    self._tracebacks = {key: now}
        if self.dropped:
            record.msg = f"[{self.dropped} log records suppressed] {record.msg}"
            self.dropped = 0
        return True


def limit_server_logs(
    rate: float, burst: int, interval: float, names: tuple[str, ...] = SERVER_LOGGERS
) -> list[LogBudget]:
    """Put a `LogBudget` on each named logger (replacing one put there before)."""
    budgets = []
    for name in names:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, LogBudget)]:
            logger.removeFilter(old)
        budget = LogBudget(rate, burst, interval)
        logger.addFilter(budget)
        budgets.append(budget)
    return budgets


__all__ = ["SERVER_LOGGERS", "LogBudget", "limit_server_logs"]
