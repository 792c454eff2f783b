import asyncio
import contextlib
import json

import httpx
import pytest

from riftco.serve import ServerConfig, create_app
from riftco.testing.serve import ScriptedEngine


@pytest.fixture
def anyio_backend():
    return "asyncio"


@contextlib.asynccontextmanager
async def serving(source, config=None, *, wait=True, base_url="http://127.0.0.1:8000"):
    """An in-process client for create_app(source, config), with its lifespan running."""
    app = create_app(source, config or ServerConfig(model_id="scripted"))
    async with app.router.lifespan_context(app):
        if wait:
            await asyncio.to_thread(app.state.riftco.loaded.wait)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            client.app = app
            yield client


@pytest.fixture
def engine():
    return ScriptedEngine(model_id="scripted")


@pytest.fixture
def serve():
    return serving


CORPUS = "the quick brown fox jumps over the lazy dog. " * 4 + "Hello, world! 0123456789 é ü"


@pytest.fixture(scope="session")
def tiny_model():
    """A tiny random GPT-2-style model and a byte tokenizer that fits it."""
    import riftco.nn as nn
    import riftco.text as text

    tokenizer = text.BpeTokenizer.train(CORPUS, vocab_size=300)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=96
    )
    return nn.DecoderOnlyTransformer(config, seed=5), tokenizer


@pytest.fixture
def batch_engine(tiny_model):
    from riftco.serve import BatchEngine
    from riftco.serve.scheduler import SchedulerLimits

    model, tokenizer = tiny_model

    def make(**limits):
        return BatchEngine(
            model, tokenizer, model_id="tiny", page_size=8, limits=SchedulerLimits(**limits)
        )

    return make


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


@pytest.fixture
def leave():
    """``await leave(app, body, leave_after_chunks)``: one POST through the ASGI app
    by a client that disconnects after some body chunks (0: while waiting)."""
    return call_and_leave
