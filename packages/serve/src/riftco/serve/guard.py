"""ASGI middleware that runs before any route: the Host check and the API key."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

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


class Guard:
    """Refuses a foreign Host (421) when bound to loopback, and a missing or wrong
    API key (401). The key comparison takes the same time wherever it differs."""

    def __init__(self, app: Any, config: ServerConfig, counters: HttpCounters) -> None:
        self.app = app
        self.config = config
        self.counters = counters
        key = config.api_key
        self._key = hashlib.sha256(key.encode()).digest() if key else None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        host = _header(scope, b"host")
        if host is None and scope.get("server"):
            host = str(scope["server"][0])
        if not self.config.host_allowed(host or ""):
            self.counters.add("guard", 421)
            await send_error(
                send,
                421,
                f"Host {host!r} is not served here; this server answers loopback names "
                "(start it with --allowed-hosts to add a load balancer's name)",
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
        await self.app(scope, receive, send)

    def _authorized(self, header: str | None) -> bool:
        assert self._key is not None
        scheme, _, token = (header or "").partition(" ")
        presented = hashlib.sha256(token.strip().encode("latin-1", "replace")).digest()
        # Equal-length digests and compare_digest: the time taken says nothing
        # about where, or whether, the presented key differs.
        matches = hmac.compare_digest(presented, self._key)
        return scheme.lower() == "bearer" and matches


__all__ = ["PROTECTED_PREFIXES", "Guard", "send_error"]
