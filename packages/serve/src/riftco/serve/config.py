"""HTTP server settings, with the secure defaults."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and the loopback addresses (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """Settings of the HTTP layer.

    ``bind_host`` is the address the server listens on: when it is a loopback
    address, requests whose Host header is not a loopback name (or one of
    ``allowed_hosts``) get 421, which defeats DNS rebinding. ``api_key``, when
    set, is required as ``Authorization: Bearer KEY`` on ``/v1/*`` and
    ``/metrics``. ``max_tokens_limit`` bounds ``max_tokens``; requests that
    omit it get ``default_max_tokens``.
    """

    model_id: str = "riftco"
    bind_host: str = "127.0.0.1"
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = 1 << 20
    max_tokens_limit: int = 4096
    default_max_tokens: int = 256
    max_stop_strings: int = 4
    max_stop_length: int = 256
    retry_after_seconds: int = 1

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0 or self.max_tokens_limit <= 0:
            raise ValueError("ServerConfig: max_body_bytes and max_tokens_limit must be positive")
        if not 0 < self.default_max_tokens <= self.max_tokens_limit:
            raise ValueError(
                f"ServerConfig: default_max_tokens {self.default_max_tokens} must be in "
                f"1..max_tokens_limit ({self.max_tokens_limit})"
            )
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerConfig: api_key must not be empty")

    @property
    def checks_host(self) -> bool:
        """Whether the Host header is checked (the server is bound to loopback)."""
        return is_loopback(self.bind_host)

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request with this Host header may be served."""
        if not self.checks_host:
            return True
        host = _strip_port(host_header)
        if not host:
            return False
        return is_loopback(host) or host.lower() in {h.lower() for h in self.allowed_hosts}


def _strip_port(host_header: str) -> str:
    host = host_header.strip()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else ""
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host


__all__ = ["ServerConfig", "is_loopback"]
