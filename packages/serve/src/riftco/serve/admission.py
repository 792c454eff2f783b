"""Who gets a connection: per-client and global caps, and what the descriptors allow.

`Admission` is the bookkeeping the guarded protocol and the listener share. A new
connection is admitted when its client (its peer address, see `client_key`) holds
fewer than ``per_client`` connections and the server holds fewer than ``cap``. When
the server is full, a client holding few connections still gets in: the oldest
connection that has no request under way, of the client holding the most (at least
two more than the newcomer), is closed to make room. So one client, or a few,
squatting on silent sockets cannot keep anyone else out; they can only push each
other out.

The descriptor budget: at start the soft ``RLIMIT_NOFILE`` is raised to the hard
limit where allowed (`raise_open_file_limit`), and

    budget = soft limit - descriptors open at start - fd_reserve
    cap    = min(max_connections, budget - max(16, budget // 8))

``fd_reserve`` (64) is left for the files the process opens later (the model, the
log, the loop's own pipes, worker threads); the slack between ``cap`` and ``budget``
is room for refusals in flight (a refused connection holds its descriptor until
its 503 is written). The listener stops accepting while ``budget`` sockets are
open and resumes below it, so ``accept`` never meets ``EMFILE`` from connections.
"""

from __future__ import annotations

import ipaddress
import os
import resource
from collections.abc import Callable
from typing import Protocol

from riftco.serve.errors import LimitsError

#: A soft limit reported as unlimited is treated as this many descriptors.
UNLIMITED_DESCRIPTORS = 1 << 20


def client_key(host: object) -> str:
    """The identity per-client limits count by: the peer's IPv4 address, its IPv6
    /64 network (one host usually holds a whole /64), or its address as given."""
    text = str(host or "")
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if not address.is_loopback:
            return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit where allowed; ``(soft, hard)`` after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, UNLIMITED_DESCRIPTORS)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # macOS caps it below an unlimited hard limit
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def open_descriptors() -> int:
    """How many descriptors this process has open (a generous guess where unknown)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 64


def descriptor_budget(reserve: int) -> int:
    """Sockets the server may hold at once: the soft limit less what is open and ``reserve``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = UNLIMITED_DESCRIPTORS
    return soft - open_descriptors() - reserve


def connection_cap(max_connections: int, budget: int) -> int:
    """The connection cap under a descriptor ``budget`` (see the module's formula)."""
    cap = min(max_connections, budget - max(16, budget // 8))
    if cap < 1:
        raise LimitsError(
            f"the open-file limit leaves {budget} descriptors for sockets, too few to "
            "serve; raise it (ulimit -n) or lower fd_reserve"
        )
    return cap


class Admissible(Protocol):
    """What `Admission` needs of a connection."""

    def evictable(self) -> bool: ...

    def evict(self) -> None: ...


class Admission:
    """Connections by client, the caps, and the descriptor budget."""

    def __init__(
        self,
        max_connections: int,
        per_client: int,
        fd_reserve: int,
        exempt: frozenset[str] = frozenset(),
    ) -> None:
        self.max_connections = max_connections
        self.per_client_limit = per_client
        self.fd_reserve = fd_reserve
        self.exempt = frozenset(client_key(h) for h in exempt)
        self.clients: dict[str, dict[Admissible, None]] = {}
        self.admitted = 0
        self.sockets = 0  # accepted sockets not yet closed, admitted or being refused
        self.evicted_total = 0
        self.refused_total = 0
        self.on_release: Callable[[], None] | None = None
        self._budget: int | None = None
        self._cap = 0

    def start(self) -> None:
        """Measure the descriptor budget now (at server start, after the limit is raised)."""
        self._budget = descriptor_budget(self.fd_reserve)
        self._cap = connection_cap(self.max_connections, self._budget)

    @property
    def budget(self) -> int:
        if self._budget is None:
            self.start()
        assert self._budget is not None
        return self._budget

    @property
    def cap(self) -> int:
        if self._budget is None:
            self.start()
        return self._cap

    @property
    def per_client(self) -> int:
        return min(self.per_client_limit, self.cap)

    def held_by(self, client: str) -> int:
        return len(self.clients.get(client, ()))

    def opened(self) -> None:
        self.sockets += 1

    def closed(self) -> None:
        self.sockets -= 1
        if self.on_release is not None:
            self.on_release()

    def admit(self, conn: Admissible, client: str) -> str | None:
        """Admit ``conn`` (None), or say why not: ``"client"`` or ``"server"``."""
        held = self.held_by(client)
        limited = self.per_client_limit < self.cap and client not in self.exempt
        if limited and held >= self.per_client_limit:
            self.refused_total += 1
            return "client"
        if self.admitted >= self.cap:
            found = self._victim(held)
            if found is None:
                self.refused_total += 1
                return "server"
            self.release(*found)
            self.evicted_total += 1
            found[0].evict()
        self.clients.setdefault(client, {})[conn] = None
        self.admitted += 1
        return None

    def release(self, conn: Admissible, client: str) -> None:
        """Forget ``conn`` of ``client`` (idempotent)."""
        held = self.clients.get(client)
        if held is None or conn not in held:
            return
        del held[conn]
        self.admitted -= 1
        if not held:
            del self.clients[client]

    def _victim(self, newcomer_holds: int) -> tuple[Admissible, str] | None:
        heaviest = sorted(self.clients.items(), key=lambda item: len(item[1]), reverse=True)
        for client, held in heaviest:
            if len(held) <= newcomer_holds + 1:
                return None
            for conn in held:  # oldest first
                if conn.evictable():
                    return conn, client
        return None


__all__ = [
    "Admission",
    "client_key",
    "connection_cap",
    "descriptor_budget",
    "open_descriptors",
    "raise_open_file_limit",
]
