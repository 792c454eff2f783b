"""A one-request event channel from a worker thread to an asyncio consumer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

from riftco.serve.engine import Event, Finished
from riftco.serve.errors import GenerationFailed


class EventChannel:
    """Events put by any thread, read by ``async for`` on one event loop.

    ``put`` never blocks. The stream ends after a `Finished` event or a
    ``fail``. ``aclose`` (or leaving the ``async for`` early) calls ``on_close``
    once, so the producer can stop working on the request and free its cache.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_close: Callable[[], None] | None = None
    ) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._on_close = on_close
        self._lock = threading.Lock()
        self._ended = False  # the producer is done (Finished or failure)
        self._closed = False  # the consumer is done

    def put(self, event: Event) -> None:
        with self._lock:
            if self._ended:
                return
            if isinstance(event, Finished):
                self._ended = True
        self._deliver(event)

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._deliver(error)

    @property
    def ended(self) -> bool:
        return self._ended

    def _deliver(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, BaseException):
                    if isinstance(item, GenerationFailed):
                        raise item
                    raise GenerationFailed(f"generation failed: {item}") from item
                yield item  # type: ignore[misc]
                if isinstance(item, Finished):
                    return
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            notify = not self._ended
        if notify and self._on_close is not None:
            self._on_close()


__all__ = ["EventChannel"]
