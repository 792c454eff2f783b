"""The OpenAI-shaped routes over a scripted engine: shapes, streaming, limits."""

import json

import pytest

pytestmark = pytest.mark.anyio


def sse_events(text):
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events
    return [json.loads(e) for e in events[:-1]]


async def test_completion_shape_and_usage(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": "one two three"}
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == "scripted"
    assert body["choices"] == [
        {"index": 0, "text": "three two one", "logprobs": None, "finish_reason": "stop"}
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


async def test_chat_shape(serve, engine):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a b"}]
    async with serve(engine) as client:
        r = await client.post(
            "/v1/chat/completions", json={"model": "scripted", "messages": messages}
        )
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "b a"}
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 2
    assert engine.seen[0].messages[0].role == "system"


async def test_sampling_fields_reach_the_engine(serve, engine):
    fields = {
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 123,
        "stop": ["x", "y"],
        "repetition_penalty": 1.2,
        "user": "ignored",
        "n": 1,
        "logprobs": None,
    }
    async with serve(engine) as client:
        r = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": "a", **fields}
        )
    assert r.status_code == 200, r.text
    options, stop = engine.seen[0].options, engine.seen[0].stop
    assert (options.max_new_tokens, options.temperature, options.top_p) == (7, 0.5, 0.9)
    assert (options.top_k, options.seed, stop) == (40, 123, ("x", "y"))
    assert options.repetition_penalty == 1.2


async def test_max_tokens_gives_length(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": "a b c d", "max_tokens": 2}
        )
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("d c", "length")


async def test_stop_string_is_cut(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/completions", json={"model": "scripted", "prompt": "a b c d", "stop": " b"}
        )
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("d c", "stop")


async def test_chat_stream(serve, engine):
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "x y z"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = sse_events(r.text)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "z y x"
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finals] == ["stop"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


async def test_completion_stream(serve, engine):
    body = {"model": "scripted", "prompt": "1 2 3 4", "stream": True, "max_tokens": 3}
    async with serve(engine) as client:
        r = await client.post("/v1/completions", json=body)
    chunks = sse_events(r.text)
    assert "".join(c["choices"][0]["text"] for c in chunks) == "4 3 2"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "usage" not in chunks[-1]


async def test_token_id_prompt(serve, engine):
    async with serve(engine) as client:
        r = await client.post("/v1/completions", json={"model": "scripted", "prompt": [5, 6]})
    assert r.status_code == 200
    assert engine.seen[0].prompt == (5, 6)


async def test_models_and_model_card(serve, engine):
    async with serve(engine) as client:
        listing = (await client.get("/v1/models")).json()
        card = await client.get("/v1/models/scripted")
        missing = await client.get("/v1/models/other")
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["scripted"]
    assert listing["data"][0]["object"] == "model"
    assert card.status_code == 200 and card.json()["id"] == "scripted"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


async def test_metrics(serve, engine):
    async with serve(engine) as client:
        await client.post("/v1/completions", json={"model": "scripted", "prompt": "a b"})
        r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "riftco_requests_waiting",
        "riftco_requests_running",
        "riftco_kv_cache_pages_in_use",
        "riftco_generation_tokens_per_second",
    ):
        assert f"# TYPE {name} gauge" in text
    assert "riftco_model_ready 1" in text
    assert "riftco_generation_tokens_total 2" in text
    assert 'riftco_http_responses_total{route="/v1/completions",status="200"} 1' in text


async def test_chat_page_is_self_contained(serve, engine):
    async with serve(engine) as client:
        page = await client.get("/")
        script = await client.get("/static/chat.js")
        style = await client.get("/static/chat.css")
        missing = await client.get("/static/../app.py")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="/static/chat.js"' in page.text
    assert script.status_code == 200 and "/v1/chat/completions" in script.text
    # The page asks for the oldest turns to be dropped, and says when they were.
    assert 'truncation: "auto"' in script.text and "X-Riftco-Dropped-Messages" in script.text
    assert "text/javascript" in script.headers["content-type"]
    assert style.status_code == 200
    for text in (page.text, script.text, style.text):
        assert "http://" not in text and "https://" not in text  # nothing from a CDN
    assert missing.status_code == 404
