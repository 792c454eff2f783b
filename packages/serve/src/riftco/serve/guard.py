"""ASGI middleware that runs before any route: the Host check, the API key, and the
bound on each client's requests in flight."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from riftco.serve.admission import client_key
from riftco.serve.config import ServerConfig
from riftco.serve.metrics import HttpCounters

Scope = dict[str, Any]

#: Paths that need the API key when one is set; ``/``, ``/static`` and ``/health`` do not.
PROTECTED_PREFIXES = ("/v1/", "/metrics")


async def send_error(
    send: Any,
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """An OpenAI-style JSON error response."""
    body = json.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    ).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _hosts(scope: Scope) -> list[str]:
    return [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"host"]


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return client_key(client[0]) if client else ""


class Guard:
    """Refuses a foreign Host (421) when bound to loopback, and a missing or wrong
    API key (401). The key comparison takes the same time wherever it differs.
    A client (peer address) with ``max_requests_per_client`` ``/v1/*`` requests
    already in flight gets 429 with ``Retry-After``."""

    def __init__(self, app: Any, config: ServerConfig, counters: HttpCounters) -> None:
        self.app = app
        self.config = config
        self.counters = counters
        key = config.api_key
        self._key = hashlib.sha256(key.encode()).digest() if key else None
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        hosts = _hosts(scope)
        host = hosts[0] if hosts else None
        if host is None and scope.get("server"):
            host = str(scope["server"][0])
        if len(hosts) > 1 or not self.config.host_allowed(host or ""):
            self.counters.add("guard", 421)
            named = f"{len(hosts)} Host headers" if len(hosts) > 1 else f"Host {host!r}"
            await send_error(
                send,
                421,
                f"{named}: not served here; this server answers one Host header, "
                "host[:port] naming loopback (start it with --allowed-hosts to add a "
                "load balancer's name)",
                code="misdirected_request",
            )
            return
        if self._key is not None and path.startswith(PROTECTED_PREFIXES):
            if not self._authorized(_header(scope, b"authorization")):
                self.counters.add("guard", 401)
                await send_error(
                    send,
                    401,
                    "Missing or incorrect API key; send 'Authorization: Bearer KEY'",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                return
        if not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        client = _client(scope)
        held = self.in_flight.get(client, 0)
        if held >= self.config.max_requests_per_client:
            self.counters.add("guard", 429)
            retry = str(max(1, self.config.retry_after_seconds))
            await send_error(
                send,
                429,
                f"This client already has {held} requests in flight, the most one client "
                f"may have (max_requests_per_client); retry after {retry} s",
                error_type="rate_limit_error",
                code="too_many_requests_per_client",
                headers={"Retry-After": retry},
            )
            return
        self.in_flight[client] = held + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.in_flight[client] - 1
            if left:
                self.in_flight[client] = left
            else:
                del self.in_flight[client]

    def _authorized(self, header: str | None) -> bool:
        assert self._key is not None
        scheme, _, token = (header or "").partition(" ")
        presented = hashlib.sha256(token.strip().encode("latin-1", "replace")).digest()
        # Equal-length digests and compare_digest: the time taken says nothing
        # about where, or whether, the presented key differs.
        matches = hmac.compare_digest(presented, self._key)
        return scheme.lower() == "bearer" and matches


__all__ = ["PROTECTED_PREFIXES", "Guard", "send_error"]
