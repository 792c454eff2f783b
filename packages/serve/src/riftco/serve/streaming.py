"""Responses that notice a client going away, so its request stops and frees its cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from riftco.serve.engine import Finished, GenerationStream, TextDelta

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` that watches for ``http.disconnect`` while streaming
    (whatever the ASGI version) and closes its event source either way."""

    def __init__(self, events: AsyncIterator[bytes]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self._events = events

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        sender = asyncio.ensure_future(self._send_all(send))
        watcher = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, watcher):
                task.cancel()
            await asyncio.gather(sender, watcher, return_exceptions=True)
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        if sender.done() and not sender.cancelled() and sender.exception() is not None:
            raise sender.exception()  # type: ignore[misc]

    async def _send_all(self, send: Any) -> None:
        try:
            await self.stream_response(send)
        except OSError:  # the transport closed under us: the client left
            pass


async def collect(stream: GenerationStream) -> tuple[str, Finished]:
    """All of a stream's text and its `Finished` event."""
    parts = []
    finished = None
    async for event in stream:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, Finished):
            finished = event
    if finished is None:
        raise RuntimeError("generation stream ended without a Finished event")
    return "".join(parts), finished


async def collect_until_disconnect(
    request: Request, stream: GenerationStream
) -> tuple[str, Finished | None]:
    """`collect`, cancelled (and the stream closed) if the client disconnects first.

    Returns ``("", None)`` when the client went away.
    """

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    consumer = asyncio.ensure_future(collect(stream))
    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({consumer, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not consumer.done():
            consumer.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if not consumer.done():
            await asyncio.gather(consumer, return_exceptions=True)
        await stream.aclose()
    if consumer.cancelled():
        return "", None
    return consumer.result()


__all__ = ["EventStreamResponse", "collect", "collect_until_disconnect"]
