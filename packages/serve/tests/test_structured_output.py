"""Structured output and tool calls through the official ``openai`` client over a
real model: ``response_format`` (json_object, json_schema) in chat and completions,
``tools`` / ``tool_choice`` returning OpenAI ``tool_calls`` (streamed and not), and
the typed refusals (a schema the grammar engine refuses, a hostile one, a template
without a tool-call syntax)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time

import httpx
import pytest

import riftco.nn as nn
from riftco.serve import BatchEngine, ServerConfig, create_app
from riftco.serve.scheduler import SchedulerLimits

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.anyio

CORPUS = "the quick brown fox jumps over the lazy dog. " * 4 + 'Oslo Paris {"ok": true} [1, 2]'
MESSAGES = [{"role": "user", "content": "weather?"}]
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "city": {"enum": ["Oslo", "Paris"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["ok", "city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Oslo", "Paris"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}


def make_engine(chat_template=None):
    import riftco.text as text

    kw = {} if chat_template is None else {"chat_template": chat_template}
    tokenizer = text.BpeTokenizer.train(CORPUS, vocab_size=320, **kw)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=1024
    )
    model = nn.DecoderOnlyTransformer(config, seed=3)
    return BatchEngine(
        model, tokenizer, model_id="tiny", page_size=8, limits=SchedulerLimits(max_running=8)
    )


@pytest.fixture
def engine():
    return make_engine()


@contextlib.asynccontextmanager
async def openai_client(engine):
    app = create_app(engine, ServerConfig(model_id="tiny"))
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(app.state.riftco.loaded.wait)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as h:
            yield openai.AsyncOpenAI(
                base_url="http://127.0.0.1:8000/v1", api_key="none", http_client=h
            )


def schema_format(schema=SCHEMA):
    return {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    }


async def chat(client, stream, **fields):
    """Per choice: (content, finish_reason, tool_calls as [(name, arguments)])."""
    if not stream:
        reply = await client.chat.completions.create(model="tiny", messages=MESSAGES, **fields)
        return [
            (
                c.message.content,
                c.finish_reason,
                [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []],
            )
            for c in reply.choices
        ]
    content: dict[int, str] = {}
    finish: dict[int, str] = {}
    calls: dict[int, list[tuple[str, str]]] = {}
    async for chunk in await client.chat.completions.create(
        model="tiny", messages=MESSAGES, stream=True, **fields
    ):
        for c in chunk.choices:
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
            for t in c.delta.tool_calls or []:
                assert t.id.startswith("call_") and t.type == "function"
                calls.setdefault(c.index, []).append((t.function.name, t.function.arguments))
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return [
        (content[i] or None if calls.get(i) else content[i], finish[i], calls.get(i, []))
        for i in sorted(content)
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_json_schema_output_parses_and_validates(engine, stream):
    fields = dict(response_format=schema_format(), n=4, temperature=1.5, seed=5, max_tokens=80)
    async with openai_client(engine) as client:
        choices = await chat(client, stream, **fields)
        completion = await client.completions.create(
            model="tiny",
            prompt="the",
            max_tokens=80,
            seed=1,
            extra_body={"response_format": schema_format()},
        )
    texts = [c[0] for c in choices] + [completion.choices[0].text]
    assert len(texts) == 5
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert all(c[1] == "stop" for c in choices)


@pytest.mark.parametrize("stream", [False, True])
async def test_json_object_output_is_an_object(engine, stream):
    fields = dict(response_format={"type": "json_object"}, n=3, temperature=1.0, seed=2)
    async with openai_client(engine) as client:
        choices = await chat(client, stream, max_tokens=120, **fields)
    for text, finish, _ in choices:
        assert text.lstrip().startswith("{")
        if finish == "stop":
            assert isinstance(json.loads(text), dict)


async def test_schemas_the_engine_refuses_are_400(engine):
    refused = [
        {"type": "string", "minLength": 5, "maxLength": 2},  # no document satisfies it
        {"$ref": "http://example.com/schema"},  # not a local reference
        {"not": {}},  # outside the subset
        {"type": "frobnicate"},
    ]
    deep = {"type": "object"}
    for _ in range(500):
        deep = {"type": "array", "items": deep}
    async with openai_client(engine) as client:
        for schema in [*refused, deep]:
            started = time.monotonic()
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.create(
                    model="tiny", messages=MESSAGES, response_format=schema_format(schema)
                )
            assert time.monotonic() - started < 10
            error = info.value.body
            assert error["code"] == "invalid_schema"
            assert error["param"] == "response_format.json_schema.schema"
        with pytest.raises(openai.UnprocessableEntityError):
            await client.chat.completions.create(
                model="tiny", messages=MESSAGES, response_format={"type": "xml"}
            )
        with pytest.raises(openai.UnprocessableEntityError):
            await client.chat.completions.create(
                model="tiny",
                messages=MESSAGES,
                response_format={"type": "json_schema", "json_schema": {"name": "a b"}},
            )
        # The server still serves after the refusals.
        reply = await client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3)
        assert reply.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("stream", [False, True])
async def test_required_tool_calls_come_back_as_openai_tool_calls(engine, stream):
    fields = dict(tools=[WEATHER, TIME], tool_choice="required", n=3, temperature=1.2, seed=9)
    async with openai_client(engine) as client:
        # One call each: the grammar then allows only the end of the reply.
        choices = await chat(client, stream, max_tokens=300, parallel_tool_calls=False, **fields)
        several = await chat(client, stream, max_tokens=400, **fields)
        named = await chat(
            client,
            stream,
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            max_tokens=200,
        )
    for content, finish, calls in choices:
        assert finish == "tool_calls" and calls and content is None
        for name, arguments in calls:
            assert name in ("get_weather", "get_time")
            parsed = json.loads(arguments)
            if name == "get_weather":
                jsonschema.validate(parsed, WEATHER["function"]["parameters"])
            else:
                assert parsed == {}
    ((content, finish, calls),) = named
    assert finish == "tool_calls" and len(calls) == 1 and calls[0][0] == "get_weather"
    for content, finish, calls in several:  # parallel calls: complete ones come back
        assert finish in ("tool_calls", "length") and calls
        assert finish == "length" or content is None


async def test_tool_choice_none_and_auto_and_a_tool_turn(engine):
    history = [
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    async with openai_client(engine) as client:
        none = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=[WEATHER], tool_choice="none", max_tokens=8
        )
        auto = await client.chat.completions.create(
            model="tiny", messages=history, tools=[WEATHER], max_tokens=40, seed=1
        )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].finish_reason in ("stop", "length")
    choice = auto.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls)


async def test_tools_are_refused_for_a_template_without_a_tool_call_syntax():
    from riftco.text.chat import DEFAULT_CHAT_TEMPLATE

    plain = dataclasses.replace(DEFAULT_CHAT_TEMPLATE, tool_call=None)
    async with openai_client(make_engine(plain)) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="tiny", messages=MESSAGES, tools=[WEATHER])
        assert info.value.body["code"] == "tools_unsupported"
        assert "tool-call syntax" in info.value.body["message"]
        ok = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=[WEATHER], tool_choice="none", max_tokens=2
        )
        assert ok.choices[0].message.tool_calls is None


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"tools": [{"type": "function"}]}, 422, "tools"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, 422, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            422,
            "tool_choice",
        ),
        ({"tool_choice": "required"}, 422, "tool_choice"),
        ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, 400, "response_format"),
        ({"functions": [{"name": "f"}]}, 400, "functions"),
    ],
)
async def test_tool_fields_are_validated(engine, fields, status, param):
    app = create_app(engine, ServerConfig(model_id="tiny"))
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(app.state.riftco.loaded.wait)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as h:
            r = await h.post(
                "/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, **fields}
            )
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param
