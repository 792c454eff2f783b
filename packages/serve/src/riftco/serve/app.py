"""The ASGI app factory: OpenAI-compatible routes, health, metrics and the chat page.

``create_app(engine_or_loader, config)`` returns a Starlette app that any ASGI
host runs (uvicorn, hypercorn, a Ray Serve deployment). A loader (a callable
returning an `Engine`) runs in a thread at startup, so ``/health`` answers 503
until the model is loaded and 200 after.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeGuard, cast

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from riftco.serve import metrics
from riftco.serve.chat_page import page_routes
from riftco.serve.config import ServerConfig
from riftco.serve.engine import Engine, Finished, GenerationStream, TextDelta
from riftco.serve.errors import GenerationFailed, ModelNotFound, NotReady, Overloaded, RequestError
from riftco.serve.guard import Guard
from riftco.serve.openapi import openapi_document
from riftco.serve.protocol import ParsedRequest, parse_chat, parse_completion
from riftco.serve.responses import SSE_DONE, Shapes, sse
from riftco.serve.streaming import EventStreamResponse, collect_all_until_disconnect, merged

log = logging.getLogger("riftco.serve")

EngineSource = Engine | Callable[[], Engine]


class ServerState:
    """The engine once loaded, or why it is not; shared by every route."""

    def __init__(self, source: EngineSource, config: ServerConfig) -> None:
        self.source = source
        self.config = config
        self.engine: Engine | None = None
        self.load_error: str | None = None
        self.created = int(time.time())
        self.counters = metrics.HttpCounters()
        self.loaded = threading.Event()

    def load(self) -> None:
        try:
            source = self.source
            engine = source if _is_engine(source) else cast(Callable[[], Engine], source)()
            engine.start()
            self.engine = engine
        except Exception as exc:  # reported by /health, never raised into the host
            log.exception("loading the model failed")
            self.load_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.loaded.set()

    def require_engine(self) -> Engine:
        if self.engine is not None:
            return self.engine
        if self.load_error is not None:
            raise NotReady(f"The model failed to load: {self.load_error}")
        raise NotReady("The model is loading; retry shortly")

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def _is_engine(source: EngineSource) -> TypeGuard[Engine]:
    return hasattr(source, "submit") and hasattr(source, "stats")


def create_app(source: EngineSource, config: ServerConfig | None = None) -> Starlette:
    """An ASGI app serving ``source`` (an `Engine`, or a callable that loads one)."""
    config = config or ServerConfig()
    state = ServerState(source, config)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        loader = threading.Thread(target=state.load, name="riftco-serve-load", daemon=True)
        loader.start()
        try:
            yield
        finally:
            await asyncio.to_thread(state.loaded.wait)
            state.close()

    routes = [
        Route("/health", partial(_health, state), methods=["GET"]),
        Route("/metrics", partial(_metrics, state), methods=["GET"]),
        Route("/openapi.json", partial(_openapi, state), methods=["GET"]),
        Route("/v1/models", partial(_models, state), methods=["GET"]),
        Route("/v1/models/{model:path}", partial(_model, state), methods=["GET"]),
        Route("/v1/completions", partial(_generate, state, chat=False), methods=["POST"]),
        Route("/v1/chat/completions", partial(_generate, state, chat=True), methods=["POST"]),
        *page_routes(),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.riftco = state
    return _wrap(app, state)


def _wrap(app: Starlette, state: ServerState) -> Starlette:
    # Guard runs first; it keeps the Starlette object's attributes reachable
    # (``app.state``) for hosts that look for them.
    app.add_middleware(Guard, config=state.config, counters=state.counters)
    return app


def _error(state: ServerState, route: str, exc: RequestError) -> JSONResponse:
    headers = {}
    if isinstance(exc, (Overloaded, NotReady)):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    state.counters.add(route, exc.status)
    return JSONResponse(exc.to_body(), status_code=exc.status, headers=headers)


async def _health(state: ServerState, request: Request) -> Response:
    if state.engine is not None:
        state.counters.add("/health", 200)
        return JSONResponse({"status": "ok", "model": state.engine.model_id})
    status = "error" if state.load_error else "loading"
    state.counters.add("/health", 503)
    body = {"status": status, **({"error": state.load_error} if state.load_error else {})}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


async def _openapi(state: ServerState, request: Request) -> Response:
    return JSONResponse(openapi_document(state.config))


async def _metrics(state: ServerState, request: Request) -> Response:
    engine = state.engine
    text = metrics.render(engine.stats() if engine else None, state.counters, engine is not None)
    return Response(text, media_type=metrics.CONTENT_TYPE)


def _model_card(state: ServerState, engine: Engine) -> dict[str, Any]:
    return {
        "id": engine.model_id,
        "object": "model",
        "created": state.created,
        "owned_by": "riftco",
    }


async def _models(state: ServerState, request: Request) -> Response:
    engine = state.engine
    data = [_model_card(state, engine)] if engine is not None else []
    state.counters.add("/v1/models", 200)
    return JSONResponse({"object": "list", "data": data})


async def _model(state: ServerState, request: Request) -> Response:
    name = request.path_params["model"]
    engine = state.engine
    if engine is None or name != engine.model_id:
        return _error(state, "/v1/models", ModelNotFound(name))
    return JSONResponse(_model_card(state, engine))


async def read_json(request: Request, config: ServerConfig) -> Any:
    """The request's JSON body: 415 unless it is JSON, 413 past the size limit, 400 if malformed."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise RequestError(
            f"Expected a JSON body (Content-Type: application/json), found {media or 'none'!r}",
            code="unsupported_media_type",
            status=415,
        )
    limit = config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"The body exceeds {limit} bytes", code="body_too_large", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"The body exceeds {limit} bytes", code="body_too_large", status=413)
        chunks.append(chunk)
    return decode_json_body(b"".join(chunks))


def decode_json_body(raw: bytes) -> Any:
    """A request body's JSON value; 400 (``invalid_json``) for anything else."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"The body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise RequestError("The body's JSON is nested too deeply", code="invalid_json") from None
    except ValueError as exc:  # an integer past Python's digit limit, among others
        raise RequestError(f"The body is not acceptable JSON: {exc}", code="invalid_json") from None


async def _generate(state: ServerState, request: Request, *, chat: bool) -> Response:
    route = request.url.path
    try:
        body = await read_json(request, state.config)
        parsed = (parse_chat if chat else parse_completion)(body, state.config)
        engine = state.require_engine()
        if parsed.model != engine.model_id:
            raise ModelNotFound(parsed.model)
        streams = await _submit(engine, parsed)
    except RequestError as exc:
        return _error(state, route, exc)
    except ClientDisconnect:
        return Response(status_code=499)
    shapes = Shapes(chat, engine.model_id, parsed.logprobs is not None, parsed.n)
    headers = _dropped_header(streams[0])
    if parsed.stream:
        state.counters.add(route, 200)
        return EventStreamResponse(_events(streams, shapes, parsed), headers=headers)
    try:
        results = await collect_all_until_disconnect(request, streams)
    except GenerationFailed as exc:
        state.counters.add(route, 500)
        body = {"error": {"message": str(exc), "type": "server_error", "param": None, "code": None}}
        return JSONResponse(body, status_code=500)
    if results is None:  # the client went away; nobody reads this
        return Response(status_code=499)
    state.counters.add(route, 200)
    return JSONResponse(shapes.complete(results), headers=headers)


async def _submit(engine: Engine, parsed: ParsedRequest) -> list[GenerationStream]:
    """Queue every choice: together where the engine can (``submit_group``), else one
    by one, closing those already queued when one is refused. Constraints (grammars)
    are compiled first, in a worker thread, where the engine can (``prepare``)."""
    prepare = getattr(engine, "prepare", None)
    if prepare is not None and any(
        g.constraint is not None or g.tools is not None for g in parsed.generations
    ):
        await asyncio.to_thread(prepare, parsed.generations)
    group = getattr(engine, "submit_group", None)
    if group is not None:
        return list(group(list(parsed.generations)))
    streams: list[GenerationStream] = []
    try:
        for generation in parsed.generations:
            streams.append(engine.submit(generation))
    except BaseException:
        for stream in streams:
            await stream.aclose()
        raise
    return streams


#: How many of the oldest chat turns were left out to fit the context (with
#: ``truncation: "auto"``); present only when some were.
DROPPED_HEADER = "X-Riftco-Dropped-Messages"


def _dropped_header(stream: GenerationStream) -> dict[str, str]:
    dropped = int(getattr(stream, "dropped_messages", 0) or 0)
    return {DROPPED_HEADER: str(dropped)} if dropped else {}


async def _events(streams: list[GenerationStream], shapes: Shapes, parsed: ParsedRequest):
    """SSE chunks: per choice a role chunk (chat), text chunks (with their tokens'
    log-probabilities when asked for) and a finish chunk; then usage, ``[DONE]``."""
    finished: list[Finished | None] = [None] * len(streams)
    try:
        if shapes.chat:
            for index in range(len(streams)):
                yield sse(shapes.chunk("", first=True, index=index))
        async for index, event in merged(streams):
            if isinstance(event, TextDelta):
                if event.text or event.logprobs:
                    yield sse(shapes.chunk(event.text, index=index, logprobs=event.logprobs))
            elif isinstance(event, Finished):
                finished[index] = event
                if event.tool_calls and shapes.chat:
                    yield sse(shapes.tool_calls_chunk(event.tool_calls, index=index))
                yield sse(shapes.chunk(None, event.finish_reason, index=index))
        if parsed.include_usage:
            yield sse(shapes.usage_chunk([f for f in finished if f is not None]))
    except GenerationFailed as exc:
        yield sse(
            {"error": {"message": str(exc), "type": "server_error", "param": None, "code": None}}
        )
    finally:
        for stream in streams:
            await stream.aclose()
    yield SSE_DONE


__all__ = ["DROPPED_HEADER", "ServerState", "create_app", "decode_json_body", "read_json"]
