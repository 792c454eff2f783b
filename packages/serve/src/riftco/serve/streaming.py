"""Responses that notice a client going away, so its request stops and frees its cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from riftco.serve.engine import Event, Finished, GenerationStream, TextDelta, TokenLogprob
from riftco.serve.responses import ChoiceResult

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` that watches for ``http.disconnect`` while streaming
    (whatever the ASGI version) and closes its event source either way."""

    def __init__(self, events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> None:
        super().__init__(
            events, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})}
        )
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


async def collect_choice(stream: GenerationStream) -> ChoiceResult:
    """All of a stream's text, its log-probabilities and its `Finished` event."""
    parts: list[str] = []
    entries: list[TokenLogprob] = []
    finished = None
    async for event in stream:
        if isinstance(event, TextDelta):
            parts.append(event.text)
            entries.extend(event.logprobs)
        elif isinstance(event, Finished):
            finished = event
    if finished is None:
        raise RuntimeError("generation stream ended without a Finished event")
    return ChoiceResult("".join(parts), finished, entries)


async def collect_all_until_disconnect(
    request: Request, streams: Sequence[GenerationStream]
) -> list[ChoiceResult] | None:
    """Every choice collected at once (`collect_choice`), all cancelled (and every
    stream closed) if the client disconnects first: None then. A failed choice
    raises its `GenerationFailed` after the others are closed."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def gather() -> list[ChoiceResult]:
        return list(await asyncio.gather(*(collect_choice(s) for s in streams)))

    consumer = asyncio.ensure_future(gather())
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
        for stream in streams:
            await stream.aclose()
    if consumer.cancelled():
        return None
    return consumer.result()


async def merged(
    streams: Sequence[GenerationStream],
) -> AsyncIterator[tuple[int, Event]]:
    """The events of several streams as they come, each with its stream's index; a
    failure of one is raised (the others are closed by the caller)."""
    queue: asyncio.Queue[tuple[int, Event | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: GenerationStream) -> None:
        try:
            async for event in stream:
                await queue.put((index, event))
        except Exception as exc:  # handed to the reader, which raises it
            await queue.put((index, exc))
            return
        await queue.put((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            index, item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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


__all__ = [
    "EventStreamResponse",
    "collect",
    "collect_all_until_disconnect",
    "collect_choice",
    "collect_until_disconnect",
    "merged",
]
