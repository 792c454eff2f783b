"""Connection limits for the HTTP server: idle, slow and greedy clients cannot hold it.

uvicorn closes a keep-alive connection that stays silent after a response, but a
connection that never sends a request (or trickles one in a byte at a time) is
never closed, and nothing bounds how many there are or who holds them.
`guarded_protocol(limits)` returns uvicorn's h11 protocol with these bounds added:

- ``first_byte_timeout``, ``header_timeout``, ``request_timeout``: a new connection
  has ``first_byte_timeout`` seconds to send its first byte and ``header_timeout``
  seconds (from the moment it opened) to complete the request's headers; the body
  must then be in before ``request_timeout`` from the same moment. A keep-alive
  connection's next request is timed from its first byte. Late clients get 408
  and are closed.
- ``keep_alive_timeout``: how long an idle keep-alive connection stays open;
- ``max_connections_per_client``, ``max_connections``: a client (a peer address,
  `riftco.serve.admission.client_key`) holding its maximum, or a server that is full
  with no connection to spare, gets 503 and a close at once, before any parsing,
  so a flood of sockets costs one write and one close each. A full server makes
  room for a client holding few connections by closing an idle one of the client
  holding the most (`riftco.serve.admission.Admission`).
- the descriptor budget (``fd_reserve``): the cap is lowered to what the open-file
  limit allows, and `riftco.serve.listener.GuardedServer` stops accepting before
  the descriptors run out.

Refusals, evictions and timeouts are logged at most once per ``log_interval``
seconds, as a count, and every server logger is rate-limited (`log_budget`), so a
flood cannot grow the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from riftco.serve.admission import Admission, client_key
from riftco.serve.errors import LimitsError
from riftco.serve.log_budget import limit_server_logs

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
    """Bounds on the server's connections (seconds and counts, all positive).

    ``trusted_proxies``: peer addresses (a reverse proxy's) exempt from the
    per-client connection cap; they still count against ``max_connections``.
    ``log_rate`` and ``log_burst`` bound the records a second each server logger
    writes (`riftco.serve.log_budget.LogBudget`).
    """

    max_connections: int = 512
    request_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    log_interval: float = 10.0
    max_connections_per_client: int = 64
    first_byte_timeout: float = 5.0
    header_timeout: float = 10.0
    fd_reserve: int = 64
    log_rate: float = 20.0
    log_burst: int = 200
    trusted_proxies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "max_connections",
            "request_timeout",
            "keep_alive_timeout",
            "log_interval",
            "max_connections_per_client",
            "first_byte_timeout",
            "header_timeout",
            "fd_reserve",
            "log_rate",
            "log_burst",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise LimitsError(f"ConnectionLimits: {name} must be positive, found {value!r}")
        for name in ("max_connections", "max_connections_per_client", "fd_reserve", "log_burst"):
            if not isinstance(getattr(self, name), int):
                raise LimitsError(
                    f"ConnectionLimits: {name} must be an integer, found {getattr(self, name)!r}"
                )

    def deadline(self, stage: str) -> float:
        """Seconds from a request's start allowed for ``stage`` (``first_byte``,
        ``headers``, ``body``): each is capped by the stages that contain it."""
        if stage == "first_byte":
            return min(self.first_byte_timeout, self.header_timeout, self.request_timeout)
        if stage == "headers":
            return min(self.header_timeout, self.request_timeout)
        return self.request_timeout


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


def _peer(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, (tuple, list)) and peer:
        return client_key(peer[0])
    return None  # a Unix socket: no address to count by


def guarded_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with `limits` enforced (pass it as ``uvicorn.Config(http=...)``).

    The class's ``admission`` is the connection bookkeeping its instances share
    (`riftco.serve.listener.GuardedServer` reads it to pause accepting)."""
    admission = Admission(
        limits.max_connections,
        limits.max_connections_per_client,
        limits.fd_reserve,
        exempt=frozenset(limits.trusted_proxies),
    )
    refused = RateLimitedLog(
        "refused %d connection(s) over the connection limit in the last %.0f s",
        limits.log_interval,
    )
    refused_client = RateLimitedLog(
        "refused %d connection(s) over the per-client connection limit in the last %.0f s",
        limits.log_interval,
    )
    evicted = RateLimitedLog(
        "closed %d idle connection(s) of the busiest clients to admit others (last %.0f s)",
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
        counters: ClassVar[dict[str, RateLimitedLog]] = {
            "refused": refused,
            "refused_client": refused_client,
            "evicted": evicted,
            "timed_out": timed_out,
        }

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            # uvicorn annotates this as int; it only reaches loop.call_later, which takes a float.
            self.timeout_keep_alive = limits.keep_alive_timeout  # type: ignore[assignment]
            self._refused = False
            self._client = ""
            self._deadline: asyncio.TimerHandle | None = None
            self._deadline_at = 0.0
            self._started: float | None = None  # when the request under way began
            self._got_bytes = False
            self._served = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            admission.opened()
            peer = _peer(transport)
            self._client = peer if peer is not None else f"local:{id(self)}"
            why = admission.admit(self, self._client)
            if why is not None:
                self._refused = True
                self.transport = transport
                (refused_client if why == "client" else refused).event()
                transport.write(_REFUSED)
                transport.close()
                return
            super().connection_made(transport)
            self._started = self.loop.time()
            self._update_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            try:
                if self._refused:
                    return
                admission.release(self, self._client)
                self._disarm()
                super().connection_lost(exc)
            finally:
                admission.closed()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._started is None and self.conn.their_state is h11.IDLE:
                self._started = self.loop.time()  # a keep-alive connection's next request
            self._got_bytes = self._got_bytes or bool(data)
            super().data_received(data)
            self._update_deadline()

        # Admission asks these of a connection it might close to make room.
        def evictable(self) -> bool:
            return self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            )

        def evict(self) -> None:
            evicted.event()
            self._disarm()
            if self.transport.is_closing():
                return
            if self._served == 0 and self.cycle is None:
                self.transport.write(_REFUSED)
            self.transport.close()

        def on_response_complete(self) -> None:
            self._served += 1
            self._started = None
            self._got_bytes = False
            self._disarm()
            super().on_response_complete()

        def _update_deadline(self) -> None:
            state = self.conn.their_state
            if self._started is None or state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the request is in; the app's own time starts
                return
            if state is h11.SEND_BODY:
                stage = "body"
            else:
                stage = "headers" if self._got_bytes else "first_byte"
            at = self._started + limits.deadline(stage)
            if self._deadline is not None and at == self._deadline_at:
                return
            self._disarm()
            self._deadline_at = at
            self._deadline = self.loop.call_at(at, self._expire)

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

    GuardedH11Protocol.admission = admission  # type: ignore[attr-defined]
    GuardedH11Protocol.limits = limits  # type: ignore[attr-defined]
    return GuardedH11Protocol


def uvicorn_config(app: Any, limits: ConnectionLimits | None = None, **options: Any) -> Any:
    """A ``uvicorn.Config`` serving ``app`` under `limits` (``options`` go to uvicorn).

    Run it with `riftco.serve.listener.GuardedServer` for the descriptor-aware
    listener; a plain ``uvicorn.Server`` gets every other bound. The loop is
    asyncio's (the listener drives its selector), and ``X-Forwarded-For`` is trusted
    only from ``limits.trusted_proxies`` (uvicorn trusts loopback by default, which
    would let any local client pick the address its per-client limits count)."""
    import uvicorn

    limits = limits or ConnectionLimits()
    if limits.trusted_proxies:
        options.setdefault("proxy_headers", True)
        options.setdefault("forwarded_allow_ips", list(limits.trusted_proxies))
    else:
        options.setdefault("proxy_headers", False)
    options.setdefault("loop", "asyncio")
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
        server_header=False,
        **options,
    )
    limit_server_logs(limits.log_rate, limits.log_burst, limits.log_interval)
    return config


__all__ = ["ConnectionLimits", "RateLimitedLog", "guarded_protocol", "uvicorn_config"]
