"""Refusals: each with its status and an OpenAI-style error object."""

import asyncio
import threading

import pytest

from riftco.serve import ServerConfig
from riftco.testing.serve import ScriptedEngine

pytestmark = pytest.mark.anyio

CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}


def error_of(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


async def test_non_json_body_is_415(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/chat/completions", content=b"hello", headers={"content-type": "text/plain"}
        )
        missing = await client.post("/v1/chat/completions", content=b"{}")
    assert error_of(r, 415)["code"] == "unsupported_media_type"
    assert error_of(missing, 415)["code"] == "unsupported_media_type"


async def test_malformed_json_is_400(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/chat/completions",
            content=b'{"model": ',
            headers={"content-type": "application/json"},
        )
        array = await client.post("/v1/chat/completions", json=[1, 2])
    assert error_of(r, 400)["code"] == "invalid_json"
    assert error_of(array, 400)["code"] == "invalid_body"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"seed": 1.5}, "seed"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": 7}, "model"),
    ],
)
async def test_invalid_fields_are_422(serve, engine, fields, param):
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json={**CHAT, **fields})
    error = error_of(r, 422)
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert not engine.seen


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"best_of": 2}, "best_of"),
        ({"suffix": "x"}, "suffix"),
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"echo": True}, "echo"),
        ({"frobnicate": 1}, "frobnicate"),
    ],
)
async def test_unsupported_parameters_are_400_by_name(serve, engine, fields, named):
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json={**CHAT, **fields})
    error = error_of(r, 400)
    assert named in error["message"] and error["param"] == named.split(",")[0]


async def test_completion_echo_with_logprobs_and_bad_batches(serve, engine):
    async with serve(engine) as client:
        both = await client.post(
            "/v1/completions",
            json={"model": "scripted", "prompt": "a", "echo": True, "logprobs": 1},
        )
        batch = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": ["a", [1, -2]]}
        )
        empty = await client.post("/v1/completions", json={"model": "scripted", "prompt": []})
        wide = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": ["a"] * 5, "n": 4}
        )
    assert "echo" in error_of(both, 400)["message"] and "prompt tokens" in both.text
    assert error_of(batch, 422)["param"] == "prompt" and "prompt[1]" in batch.text
    assert error_of(empty, 422)["param"] == "prompt"
    assert error_of(wide, 422)["param"] == "n" and "20 choices" in wide.text
    assert not engine.seen


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"n": 0}, "n", "[1, 16]"),
        ({"n": 17}, "n", "[1, 16]"),
        ({"top_logprobs": 3}, "top_logprobs", "needs 'logprobs'"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "[0, 20]"),
        ({"logprobs": 2}, "logprobs", "boolean"),
        ({"presence_penalty": 2.5}, "presence_penalty", "[-2.0, 2.0]"),
        ({"frequency_penalty": "x"}, "frequency_penalty", "number"),
        ({"logit_bias": {"a": 1}}, "logit_bias", "decimal strings"),
        ({"logit_bias": {"5": 101}}, "logit_bias", "[-100.0, 100.0]"),
        ({"logit_bias": [5]}, "logit_bias", "object"),
    ],
)
async def test_new_sampling_fields_are_validated(serve, engine, fields, param, says):
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json={**CHAT, **fields})
    error = error_of(r, 422)
    assert error["param"] == param and says in error["message"], error
    assert not engine.seen


async def test_unknown_model_is_404(serve, engine):
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-9"})
    assert error_of(r, 404)["code"] == "model_not_found"


async def test_body_limit_is_413(serve, engine):
    config = ServerConfig(model_id="scripted", max_body_bytes=200)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 300}]}
    async with serve(engine, config) as client:
        r = await client.post("/v1/chat/completions", json=big)

        async def chunks():  # no Content-Length: the limit applies while reading
            yield b'{"model": "scripted", "messages": [{"role": "user", "content": "'
            yield b"y" * 300
            yield b'"}]}'

        streamed = await client.post(
            "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
        )
    assert error_of(r, 413)["code"] == "body_too_large"
    assert error_of(streamed, 413)["code"] == "body_too_large"


async def test_prompt_too_long(serve):
    engine = ScriptedEngine(model_id="scripted", max_context=3)
    async with serve(engine) as client:
        r = await client.post("/v1/completions", json={"model": "scripted", "prompt": "a b c d"})
    assert error_of(r, 400)["code"] == "context_length_exceeded"


async def test_full_engine_is_429_with_retry_after(serve):
    engine = ScriptedEngine(model_id="scripted", capacity=1, token_delay=0.05)
    body = {"model": "scripted", "prompt": "a b c d e f"}
    async with serve(engine) as client:
        first = asyncio.create_task(client.post("/v1/completions", json=body))
        while not engine.active:
            await asyncio.sleep(0.005)
        second = await client.post("/v1/completions", json=body)
        assert (await first).status_code == 200
    error = error_of(second, 429)
    assert error["type"] == "rate_limit_error"
    assert second.headers["retry-after"] == "2"


async def test_not_ready_until_loaded(serve, engine):
    gate = threading.Event()

    def loader():
        gate.wait(10)
        return engine

    async with serve(loader, wait=False) as client:
        health = await client.get("/health")
        models = await client.get("/v1/models")
        chat = await client.post("/v1/chat/completions", json=CHAT)
        metrics = await client.get("/metrics")
        gate.set()
        await asyncio.to_thread(client.app.state.riftco.loaded.wait)
        health_after = await client.get("/health")
        models_after = await client.get("/v1/models")
    assert health.status_code == 503 and health.json()["status"] == "loading"
    assert models.json()["data"] == []
    assert error_of(chat, 503)["code"] == "not_ready" and chat.headers["retry-after"] == "1"
    assert "riftco_model_ready 0" in metrics.text
    assert health_after.status_code == 200 and health_after.json()["model"] == "scripted"
    assert [m["id"] for m in models_after.json()["data"]] == ["scripted"]
    assert engine.started and engine.closed


async def test_failed_load_is_reported(serve):
    def loader():
        raise FileNotFoundError("no such bundle: x.rift")

    async with serve(loader) as client:
        health = await client.get("/health")
        chat = await client.post("/v1/chat/completions", json=CHAT)
    assert health.status_code == 503 and "no such bundle" in health.json()["error"]
    assert "no such bundle" in error_of(chat, 503)["message"]
