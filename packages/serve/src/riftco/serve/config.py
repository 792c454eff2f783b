"""HTTP server settings, with the secure defaults."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from riftco.serve.errors import LimitsError

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
    omit it get ``default_max_tokens``. ``max_requests_per_client`` bounds the
    ``/v1/*`` requests one peer address has in flight at once (more get 429);
    ``/health``, ``/metrics`` and the page are not counted. ``max_choices`` bounds
    the choices of one request (``n`` times the number of prompts).
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
    max_requests_per_client: int = 32
    max_choices: int = 16

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0 or self.max_tokens_limit <= 0:
            raise LimitsError("ServerConfig: max_body_bytes and max_tokens_limit must be positive")
        value = self.max_requests_per_client
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise LimitsError(
                f"ServerConfig: max_requests_per_client must be a positive integer, found {value!r}"
            )
        choices = self.max_choices
        if isinstance(choices, bool) or not isinstance(choices, int) or choices <= 0:
            raise LimitsError(
                f"ServerConfig: max_choices must be a positive integer, found {choices!r}"
            )
        if not 0 < self.default_max_tokens <= self.max_tokens_limit:
            raise LimitsError(
                f"ServerConfig: default_max_tokens {self.default_max_tokens} must be in "
                f"1..max_tokens_limit ({self.max_tokens_limit})"
            )
        if self.api_key is not None and not self.api_key:
            raise LimitsError("ServerConfig: api_key must not be empty")

    @property
    def checks_host(self) -> bool:
        """Whether the Host header is checked (the server is bound to loopback)."""
        return is_loopback(self.bind_host)

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request with this Host header may be served: the header must be
        a well-formed ``host[:port]`` (RFC 9110 section 7.2, the authority of RFC 3986
        without userinfo) naming loopback or one of ``allowed_hosts``."""
        if not self.checks_host:
            return True
        authority = parse_host_header(host_header)
        if authority is None:
            return False
        host = authority[0]
        return is_loopback(host) or host in {h.lower().rstrip(".") for h in self.allowed_hosts}


# RFC 3986 reg-name restricted to what a DNS name can be (letters, digits, '-', '_',
# dots): percent-encoding and sub-delimiters never name a real host, so they are refused.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_REG_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_host_header(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a Host header value, or None when it is not ``host[:port]``.

    ``host`` is lower-cased, without brackets and without a trailing dot: a DNS
    name, a dotted IPv4 address or a bracketed IPv6 address. Refused: userinfo
    (``127.0.0.1:80@evil.com``), several values (``a, b``), a path, query or fragment,
    percent-encoding, an IPv6 zone or IPvFuture literal, an empty or non-numeric port
    or one past 65535, and anything over 255 characters.
    """
    text = value.strip(" \t")
    if not text or len(text) > 261 or not text.isascii():
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        literal, rest = text[1:end], text[end + 1 :]
        if "%" in literal:
            return None  # a zone (fe80::1%eth0) is not allowed in a URI's host
        try:
            address = ipaddress.IPv6Address(literal)  # refuses IPvFuture and IPv4
        except ValueError:
            return None
        host = str(address)
    else:
        name, colon, port_text = text.partition(":")
        host, rest = name.lower(), (colon + port_text)
        if not _REG_NAME.fullmatch(host) or len(host) > 255:
            return None
        host = host.rstrip(".")
        if _looks_numeric(host):
            try:
                host = str(ipaddress.IPv4Address(host))
            except ValueError:
                return None  # 127.1, 0x7f.0.0.1, 2130706433: forms browsers differ on
    if not rest:
        return host, None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]):
        return None
    port = int(rest[1:])
    return (host, port) if port <= 65535 else None


def _looks_numeric(host: str) -> bool:
    last = host.rsplit(".", 1)[-1]
    return bool(last) and (last.isdigit() or last.startswith("0x"))


__all__ = ["ServerConfig", "is_loopback", "parse_host_header"]
