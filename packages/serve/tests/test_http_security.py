"""Security defaults: the Host check against DNS rebinding, and the API key."""

import pytest

from riftco.serve import ServerConfig
from riftco.serve.config import is_loopback

pytestmark = pytest.mark.anyio

CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "host",
    ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "LOCALHOST.", "app.localhost"],
)
def test_loopback_names(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["example.com", "10.0.0.1", "0.0.0.0", "localhost.evil.com", ""])
def test_foreign_names(host):
    assert not is_loopback(host)


@pytest.mark.parametrize("host", ["evil.example:8000", "10.1.1.1", "localhost.evil.com"])
async def test_foreign_host_is_421_on_loopback(serve, engine, host):
    async with serve(engine) as client:
        r = await client.get("/health", headers={"host": host})
        page = await client.get("/", headers={"host": host})
    assert r.status_code == 421 and r.json()["error"]["code"] == "misdirected_request"
    assert page.status_code == 421


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000"])
async def test_loopback_host_passes(serve, engine, host):
    async with serve(engine) as client:
        assert (await client.get("/health", headers={"host": host})).status_code == 200


async def test_allowed_hosts_let_a_load_balancer_through(serve, engine):
    config = ServerConfig(model_id="scripted", allowed_hosts=("llm.internal",))
    async with serve(engine, config) as client:
        ok = await client.get("/health", headers={"host": "LLM.internal:443"})
        other = await client.get("/health", headers={"host": "other.internal"})
    assert ok.status_code == 200 and other.status_code == 421


async def test_no_host_check_when_bound_elsewhere(serve, engine):
    config = ServerConfig(model_id="scripted", bind_host="0.0.0.0")
    async with serve(engine, config) as client:
        assert (await client.get("/health", headers={"host": "anything"})).status_code == 200


async def test_api_key(serve, engine):
    config = ServerConfig(model_id="scripted", api_key="s3cret")
    async with serve(engine, config) as client:
        missing = await client.post("/v1/chat/completions", json=CHAT)
        wrong = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer s3cres"}
        )
        basic = await client.get("/v1/models", headers={"authorization": "Basic s3cret"})
        metrics = await client.get("/metrics")
        right = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer s3cret"}
        )
        health = await client.get("/health")
        page = await client.get("/")
    for r in (missing, wrong, basic, metrics):
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
    assert right.status_code == 200
    assert health.status_code == 200 and page.status_code == 200
    assert len(engine.seen) == 1
