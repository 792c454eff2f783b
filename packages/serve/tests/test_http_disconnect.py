"""A client that goes away stops its request (so the engine frees its cache)."""

import asyncio
import json

import pytest

from riftco.serve import ServerConfig, create_app
from riftco.serve.testing import ScriptedEngine

pytestmark = pytest.mark.anyio


async def call_and_leave(app, body, leave_after_chunks):
    """Run one POST through the ASGI app; disconnect after some body chunks arrived."""
    path = body.pop("_path")
    payload = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": b"",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    gone = asyncio.Event()
    sent = []
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and len(sent) > leave_after_chunks:
            gone.set()

    task = asyncio.create_task(app(scope, receive, send))
    if leave_after_chunks == 0:
        await asyncio.sleep(0.05)
        gone.set()
    await asyncio.wait_for(task, 5)
    return sent


@pytest.mark.parametrize("stream", [True, False])
async def test_disconnect_closes_the_request(stream):
    engine = ScriptedEngine(model_id="scripted", token_delay=0.02)
    app = create_app(engine, ServerConfig(model_id="scripted"))
    words = " ".join(str(i) for i in range(200))
    body = {"_path": "/v1/completions", "model": "scripted", "prompt": words, "stream": stream}
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(app.state.riftco.loaded.wait)
        await call_and_leave(app, body, leave_after_chunks=2 if stream else 0)
        for _ in range(100):
            if engine.active == 0:
                break
            await asyncio.sleep(0.01)
    assert engine.closed_early == 1
    assert engine.active == 0
    assert engine.generated < 100  # it stopped long before the end
