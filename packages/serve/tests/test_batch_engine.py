"""BatchEngine behind the HTTP app: a real (tiny) model, concurrent requests,
streaming equal to non-streaming, seeds, stop strings, and freed pages."""

import asyncio
import json

import pytest

from riftco.serve import ServerConfig

pytestmark = pytest.mark.anyio

CONFIG = ServerConfig(model_id="tiny")


def chat(content, **fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **fields}


def streamed_text(body):
    text, finish = "", None
    for block in body.split("\n\n"):
        if not block.startswith("data: ") or block == "data: [DONE]":
            continue
        chunk = json.loads(block[6:])
        for choice in chunk["choices"]:
            text += choice.get("delta", {}).get("content") or choice.get("text") or ""
            finish = choice["finish_reason"] or finish
    return text, finish


async def test_completion_and_chat(serve, batch_engine):
    engine = batch_engine()
    async with serve(engine, CONFIG) as client:
        r = await client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "the quick", "max_tokens": 12, "temperature": 0},
        )
        c = await client.post("/v1/chat/completions", json=chat("hello", max_tokens=9))
    body = r.json()
    assert r.status_code == 200, body
    assert body["usage"]["prompt_tokens"] == len(engine.tokenizer.encode("the quick"))
    choice = body["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    if choice["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 12
    assert c.status_code == 200 and c.json()["choices"][0]["message"]["role"] == "assistant"
    assert engine.cache.pages_in_use == 0


async def test_streaming_matches_non_streaming_and_concurrency(serve, batch_engine):
    engine = batch_engine(max_running=8)
    prompts = ["the lazy dog", "hello", "0123", "jumps over", "é ü", "brown fox", "x", "world"]
    async with serve(engine, CONFIG) as client:

        async def one(p, stream):
            fields = dict(max_tokens=20, temperature=0, stream=stream)
            return await client.post("/v1/chat/completions", json=chat(p, **fields))

        single = [await one(p, False) for p in prompts]
        before = engine.scheduler.forwards
        together = await asyncio.gather(*(one(p, True) for p in prompts))
        concurrent_forwards = engine.scheduler.forwards - before
    for alone, streamed in zip(single, together):
        message = alone.json()["choices"][0]
        text, finish = streamed_text(streamed.text)
        assert (text, finish) == (message["message"]["content"], message["finish_reason"])
    # Batched: far fewer forwards than tokens generated.
    assert concurrent_forwards < sum(a.json()["usage"]["completion_tokens"] for a in single) / 2
    assert engine.cache.pages_in_use == 0


async def test_seeded_sampling_over_http(serve, batch_engine):
    engine = batch_engine()
    fields = dict(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50)
    async with serve(engine, CONFIG) as client:
        a = await client.post("/v1/chat/completions", json=chat("fox", seed=3, **fields))
        b = await client.post("/v1/chat/completions", json=chat("fox", seed=3, **fields))
    assert a.json()["choices"][0] == b.json()["choices"][0]


async def test_stop_string_through_the_engine(serve, batch_engine):
    engine = batch_engine()
    base = {"model": "tiny", "prompt": "the", "max_tokens": 24, "temperature": 0}
    async with serve(engine, CONFIG) as client:
        full = (await client.post("/v1/completions", json=base)).json()["choices"][0]["text"]
        assert len(full) > 4
        stop = full[2:4]
        cut = await client.post("/v1/completions", json={**base, "stop": [stop]})
    choice = cut.json()["choices"][0]
    assert choice["text"] == full[: full.find(stop)] and choice["finish_reason"] == "stop"


async def test_prompt_errors(serve, batch_engine):
    engine = batch_engine()
    async with serve(engine, CONFIG) as client:
        long = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": list(range(97))}
        )
        bad = await client.post("/v1/completions", json={"model": "tiny", "prompt": [10**6]})
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


async def test_metrics_count_the_engine(serve, batch_engine):
    engine = batch_engine()
    async with serve(engine, CONFIG) as client:
        await client.post("/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 5})
        text = (await client.get("/metrics")).text
    pages = engine.cache.pages
    assert f"riftco_kv_cache_pages_total {pages}" in text
    assert "riftco_kv_cache_pages_in_use 0" in text
    assert "riftco_requests_finished_total 1" in text
