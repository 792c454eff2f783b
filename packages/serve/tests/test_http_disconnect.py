"""A client that goes away stops its request (so the engine frees its cache)."""

import asyncio

import pytest

from riftco.serve import ServerConfig, create_app
from riftco.testing.serve import ScriptedEngine

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("stream", [True, False])
async def test_disconnect_closes_the_request(stream, leave):
    engine = ScriptedEngine(model_id="scripted", token_delay=0.02)
    app = create_app(engine, ServerConfig(model_id="scripted"))
    words = " ".join(str(i) for i in range(200))
    body = {"_path": "/v1/completions", "model": "scripted", "prompt": words, "stream": stream}
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(app.state.riftco.loaded.wait)
        await leave(app, body, leave_after_chunks=2 if stream else 0)
        for _ in range(100):
            if engine.active == 0:
                break
            await asyncio.sleep(0.01)
    assert engine.closed_early == 1
    assert engine.active == 0
    assert engine.generated < 100  # it stopped long before the end


@pytest.mark.parametrize("stream", [True, False])
async def test_disconnect_frees_the_cache_pages(stream, leave, batch_engine):
    engine = batch_engine()
    app = create_app(engine, ServerConfig(model_id="tiny"))
    body = {"_path": "/v1/completions", "model": "tiny", "prompt": "the quick brown fox"}
    body.update(max_tokens=2000, temperature=0, stream=stream)
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(app.state.riftco.loaded.wait)
        await leave(app, body, leave_after_chunks=3 if stream else 0)
        for _ in range(200):
            if engine.scheduler.running == 0 and engine.cache.pages_in_use == 0:
                break
            await asyncio.sleep(0.01)
    assert engine.cache.pages_in_use == 0 and engine.scheduler.running == 0
    assert engine.scheduler.finished_total == 0  # it was cancelled, not finished
