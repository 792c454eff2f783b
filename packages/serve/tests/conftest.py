import asyncio
import contextlib

import httpx
import pytest

from riftco.serve import ServerConfig, create_app
from riftco.serve.testing import ScriptedEngine


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
