"""Connection limits for the HTTP server: idle and slow clients cannot hold it.

uvicorn closes a keep-alive connection that stays silent after a response, but a
connection that never sends a request (or trickles one in a byte at a time) is
never closed, and nothing bounds how many there are. `guarded_protocol(limits)`
returns uvicorn's h11 protocol with three bounds added:

- ``request_timeout``: from the moment a connection opens (or a keep-alive
  connection receives its next byte), the client has this many seconds to deliver
  a whole request, headers and body; otherwise it gets 408 and is closed;
- ``keep_alive_timeout``: how long an idle keep-alive connection stays open;
- ``max_connections``: connections beyond it are answered 503 and closed at once,
  before any parsing, so a flood of sockets costs one write and one close each.

Refusals and timeouts are logged at most once per ``log_interval`` seconds, as a
count, so a flood cannot grow the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("riftco.serve")


def _plain_response(status: str, text: str, *extra: str) -> bytes:
    body = text.encode("ascii")
    head = [f"HTTP/1.1 {status}", "Connection: close", *extra, "Content-Type: text/plain"]
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


_REFUSED = _plain_response(
    "503 Service Unavailable", "too many open connections\n", "Retry-After: 1"
)
_TIMED_OUT = _plain_response("408 Request Timeout", "request timeout\n")


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds on the server's connections (seconds and counts, all positive)."""

    max_connections: int = 512
    request_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    log_interval: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "request_timeout", "keep_alive_timeout", "log_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"ConnectionLimits: {name} must be positive, found {value!r}")


class RateLimitedLog:
    """Counts events and logs their number at most once per ``interval`` seconds."""

    def __init__(self, message: str, interval: float, logger: logging.Logger = log) -> None:
        self.message = message
        self.interval = interval
        self.logger = logger
        self.pending = 0
        self.total = 0
        self.last = -float("inf")

    def event(self) -> None:
        self.pending += 1
        self.total += 1
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.logger.warning(self.message, self.pending, self.interval)
            self.pending = 0
            self.last = now


class _OnceEvery(logging.Filter):
    """Lets a given message through at most once per interval (uvicorn's own warnings)."""

    def __init__(self, messages: frozenset[str], interval: float) -> None:
        super().__init__()
        self.messages = messages
        self.interval = interval
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text not in self.messages:
            return True
        now = time.monotonic()
        if now - self.last.get(text, -float("inf")) < self.interval:
            return False
        self.last[text] = now
        return True


def guarded_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with `limits` enforced (pass it as ``uvicorn.Config(http=...)``)."""
    refused = RateLimitedLog(
        "refused %d connection(s) over the connection limit in the last %.0f s",
        limits.log_interval,
    )
    timed_out = RateLimitedLog(
        "closed %d connection(s) that sent no complete request in time (last %.0f s)",
        limits.log_interval,
    )
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _OnceEvery) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(
            _OnceEvery(frozenset({"Invalid HTTP request received."}), limits.log_interval)
        )

    class GuardedH11Protocol(H11Protocol):
        counters: ClassVar[dict[str, RateLimitedLog]] = {"refused": refused, "timed_out": timed_out}

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            # uvicorn annotates this as int; it only reaches loop.call_later, which takes a float.
            self.timeout_keep_alive = limits.keep_alive_timeout  # type: ignore[assignment]
            self._refused = False
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                self.transport = transport
                refused.event()
                transport.write(_REFUSED)
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request on a keep-alive connection starts now
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_timeout, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            timed_out.event()
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_TIMED_OUT)
            if self.cycle is not None:
                self.cycle.keep_alive = False
            self.transport.close()

    return GuardedH11Protocol


def uvicorn_config(app: Any, limits: ConnectionLimits | None = None, **options: Any) -> Any:
    """A ``uvicorn.Config`` serving ``app`` under `limits` (``options`` go to uvicorn)."""
    import uvicorn

    limits = limits or ConnectionLimits()
    return uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        server_header=False,
        **options,
    )


__all__ = ["ConnectionLimits", "RateLimitedLog", "guarded_protocol", "uvicorn_config"]
