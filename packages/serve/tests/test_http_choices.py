"""Several choices through the HTTP layer over the scripted engine (which has no
``submit_group``): indices, streaming merge, usage, and all-or-nothing queueing."""

import json

import pytest

pytestmark = pytest.mark.anyio


def sse_events(text):
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events
    return [json.loads(e) for e in events[:-1]]


async def test_n_choices_and_lists_of_prompts(serve, engine):
    body = {"model": "scripted", "prompt": ["a b", "c d e"], "n": 2}
    async with serve(engine) as client:
        r = await client.post("/v1/completions", json=body)
    reply = r.json()
    assert r.status_code == 200, r.text
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in reply["choices"]] == ["b a", "b a", "e d c", "e d c"]
    # each prompt counted once, every choice's tokens
    assert reply["usage"] == {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15}
    assert len(engine.seen) == 4


async def test_streamed_choices_each_finish(serve, engine):
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": "x y z"}],
        "n": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json=body)
    events = sse_events(r.text)
    texts, roles, finish = {}, set(), {}
    for event in events[:-1]:
        (choice,) = event["choices"]
        i = choice["index"]
        if choice["delta"].get("role"):
            roles.add(i)
        texts[i] = texts.get(i, "") + choice["delta"].get("content", "")
        if choice["finish_reason"]:
            finish[i] = choice["finish_reason"]
    assert roles == {0, 1, 2} and finish == {0: "stop", 1: "stop", 2: "stop"}
    assert texts == {0: "z y x", 1: "z y x", 2: "z y x"}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 9


async def test_a_refused_choice_closes_the_others(serve, engine):
    engine.capacity = 3
    body = {"model": "scripted", "prompt": "a b", "n": 5}
    async with serve(engine) as client:
        r = await client.post("/v1/completions", json=body)
        assert r.status_code == 429
        assert engine.closed_early == 3  # the three queued before the refusal
    assert len(engine.seen) == 3 and engine.rejected == 1
    assert r.headers["Retry-After"] == "2"


def test_max_choices_flag_and_setting():
    from riftco.serve.cli import _parser
    from riftco.serve.config import LimitsError, ServerConfig

    assert _parser().parse_args(["m.rift"]).max_choices == 16
    assert _parser().parse_args(["m.rift", "--max-choices", "4"]).max_choices == 4
    for bad in (0, -1, True, 2.5):
        with pytest.raises(LimitsError, match="max_choices"):
            ServerConfig(max_choices=bad)
