"""A uvicorn server whose listener stops accepting before the descriptors run out.

asyncio accepts a whole batch of connections (as many as the listen backlog) per
wake-up before any protocol sees one, so at a low ``RLIMIT_NOFILE`` a flood reaches
``EMFILE`` first, and asyncio then logs a traceback for every failed accept.
`GuardedServer` binds its socket itself and takes over reading it: it accepts at
most `ACCEPT_BATCH` connections a wake-up, and only while the sockets open (admitted,
being refused, or just accepted) are under the descriptor budget of the protocol's
`Admission`; at the budget it removes the listener from the selector (new clients
wait in the kernel's backlog) and puts it back once connections close. An accept
that still fails for want of resources (something else used the descriptors)
pauses the listener for `RETRY_DELAY` seconds and is logged as a count.

At start it raises the soft ``RLIMIT_NOFILE`` to the hard limit, measures the
budget and logs the figures (see `riftco.serve.admission`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from typing import Any

import uvicorn

from riftco.serve.admission import Admission, raise_open_file_limit
from riftco.serve.connections import RateLimitedLog

log = logging.getLogger("riftco.serve")

#: Connections accepted per wake-up of the listener at most.
ACCEPT_BATCH = 32
#: Seconds the listener rests after an accept failed for want of descriptors.
RETRY_DELAY = 0.5
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class _Listener:
    """Accepts on one listening socket within the admission's descriptor budget."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        server: asyncio.AbstractServer,
        sock: socket.socket,
        factory: Any,
        admission: Admission,
        ssl: Any,
        failures: RateLimitedLog,
        paused_log: RateLimitedLog,
    ) -> None:
        self.loop = loop
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.factory = factory
        self.admission = admission
        self.ssl = ssl
        self.failures = failures
        self.paused_log = paused_log
        self.in_flight = 0  # accepted, transport not yet made
        self.paused = False
        self.pauses = 0
        self._retry: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.loop.remove_reader(self.fd)  # asyncio's own accept loop
        self.loop.add_reader(self.fd, self._on_readable)

    def _open(self) -> int:
        return self.admission.sockets + self.in_flight

    def _on_readable(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if self._open() >= self.admission.budget:
                self._pause()
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self.failures.event()
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause()
                    self._retry = self.loop.call_later(RETRY_DELAY, self._resume, True)
                return
            conn.setblocking(False)
            self.in_flight += 1
            task = self.loop.create_task(self._connect(conn))
            task.add_done_callback(_quiet)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn, ssl=self.ssl)
        except Exception:  # a client gone during the TLS handshake, among others
            conn.close()
            self.failures.event()
        finally:
            self.in_flight -= 1
            self.resume_if_room()

    def _pause(self) -> None:
        if self.paused:
            return
        self.paused = True
        self.pauses += 1
        self.paused_log.event()
        self.loop.remove_reader(self.fd)

    def resume_if_room(self) -> None:
        if self.paused and self._retry is None:
            # Some hysteresis: one closed socket should not wake the listener for one accept.
            if self._open() < self.admission.budget - max(1, ACCEPT_BATCH // 2):
                self._resume()

    def _resume(self, retried: bool = False) -> None:
        if retried:
            self._retry = None
        if not self.paused or not self.server.is_serving() or self.sock.fileno() < 0:
            return
        self.paused = False
        self.loop.add_reader(self.fd, self._on_readable)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


class GuardedServer(uvicorn.Server):
    """``uvicorn.Server`` for a config from `riftco.serve.connections.uvicorn_config`:
    the open-file limit raised, and a listener that pauses at the descriptor budget."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listeners: list[_Listener] = []

    @property
    def admission(self) -> Admission:
        config = self.config
        if not config.loaded:
            config.load()
        admission = getattr(config.http_protocol_class, "admission", None)
        if not isinstance(admission, Admission):
            raise TypeError("GuardedServer needs a config from riftco.serve.uvicorn_config")
        return admission

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        admission = self.admission
        soft, hard = raise_open_file_limit()
        admission.start()
        log.info(
            "open-file limit %d (hard %d): up to %d sockets, %d connections, %d per client",
            soft,
            hard,
            admission.budget,
            admission.cap,
            admission.per_client,
        )
        own = sockets is None and config.fd is None and config.uds is None
        if own:
            sockets = [config.bind_socket()]
        await super().startup(sockets)
        if not self.started or sockets is None:
            return
        loop = asyncio.get_running_loop()
        if not isinstance(loop, asyncio.SelectorEventLoop):
            log.warning(
                "the %s loop accepts on its own: the listener cannot pause at the "
                "descriptor budget (use uvicorn's asyncio loop)",
                type(loop).__name__,
            )
            return
        failures = RateLimitedLog(
            "%d accept(s) failed (descriptors or memory short) in the last %.0f s",
            admission_interval(config),
        )
        paused = RateLimitedLog(
            "stopped accepting %d time(s) at the descriptor budget in the last %.0f s",
            admission_interval(config),
        )

        def factory() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=loop,
            )

        by_fd = {s.fileno(): s for s in sockets}
        for server in self.servers:
            for wrapped in server.sockets:
                sock = by_fd.get(wrapped.fileno())
                if sock is None:
                    continue
                listener = _Listener(
                    loop, server, sock, factory, admission, config.ssl, failures, paused
                )
                listener.start()
                self.listeners.append(listener)
        admission.on_release = self._on_release

    def _on_release(self) -> None:
        for listener in self.listeners:
            listener.resume_if_room()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for listener in self.listeners:
            listener.close()
        await super().shutdown(sockets)


def admission_interval(config: uvicorn.Config) -> float:
    limits = getattr(config.http_protocol_class, "limits", None)
    return float(getattr(limits, "log_interval", 10.0))


__all__ = ["ACCEPT_BATCH", "RETRY_DELAY", "GuardedServer"]
