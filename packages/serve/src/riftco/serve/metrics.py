"""Prometheus text exposition (format 0.0.4) of engine and HTTP counters."""

from __future__ import annotations

import threading
from collections import Counter

from riftco.serve.engine import EngineStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_ENGINE_METRICS = (
    ("riftco_requests_waiting", "gauge", "Requests queued for a place in the batch.", "waiting"),
    ("riftco_requests_running", "gauge", "Requests in the running batch.", "running"),
    ("riftco_kv_cache_pages_in_use", "gauge", "Key/value cache pages leased.", "pages_in_use"),
    ("riftco_kv_cache_pages_total", "gauge", "Key/value cache pages in the pool.", "pages_total"),
    ("riftco_prompt_tokens_total", "counter", "Prompt tokens prefilled.", "prompt_tokens_total"),
    (
        "riftco_generation_tokens_total",
        "counter",
        "Tokens generated.",
        "generated_tokens_total",
    ),
    (
        "riftco_requests_finished_total",
        "counter",
        "Requests that finished generating.",
        "requests_finished_total",
    ),
    (
        "riftco_requests_rejected_total",
        "counter",
        "Requests refused because the queue was full.",
        "requests_rejected_total",
    ),
    (
        "riftco_generation_tokens_per_second",
        "gauge",
        "Tokens generated per second over the last few seconds.",
        "tokens_per_second",
    ),
)


class HttpCounters:
    """Responses by route and status, safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, int]] = Counter()

    def add(self, route: str, status: int) -> None:
        with self._lock:
            self._counts[(route, status)] += 1

    def snapshot(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._counts)


def render(stats: EngineStats | None, http: HttpCounters, ready: bool) -> str:
    """The ``/metrics`` page."""
    lines = [
        "# HELP riftco_model_ready 1 once the model is loaded and serving.",
        "# TYPE riftco_model_ready gauge",
        f"riftco_model_ready {int(ready)}",
    ]
    stats = stats or EngineStats()
    for name, kind, help_text, attr in _ENGINE_METRICS:
        value = getattr(stats, attr)
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {_number(value)}"]
    lines += [
        "# HELP riftco_http_responses_total HTTP responses by route and status.",
        "# TYPE riftco_http_responses_total counter",
    ]
    for (route, status), count in sorted(http.snapshot().items()):
        lines.append(f'riftco_http_responses_total{{route="{route}",status="{status}"}} {count}')
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


__all__ = ["CONTENT_TYPE", "HttpCounters", "render"]
