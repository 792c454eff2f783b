"""Hostile request bodies: each is a 4xx OpenAI error naming the field, never a 500."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riftco.serve import ServerConfig
from riftco.serve.errors import RequestError
from riftco.serve.protocol import parse_chat, parse_completion

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


def chat(**fields):
    return {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], **fields}


async def post(client, body: bytes, route="/v1/chat/completions"):
    return await client.post(route, content=body, headers=JSON)


@pytest.mark.parametrize(
    ("role", "kind"), [(["user"], "list"), ({"a": 1}, "dict"), (7, "int"), (None, "NoneType")]
)
async def test_role_of_the_wrong_type_is_422_naming_it(serve, engine, role, kind):
    body = json.dumps({"model": "scripted", "messages": [{"role": role, "content": "x"}]})
    async with serve(engine) as client:
        r = await post(client, body.encode())
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["param"] == "messages[0].role" and kind in error["message"]


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_deeply_nested_json_is_400(serve, engine, route):
    body = b'{"model": "scripted", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with serve(engine) as client:
        r = await post(client, body, route)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"
    assert "nested" in r.json()["error"]["message"]


@pytest.mark.parametrize("field", ["seed", "max_tokens", "temperature", "top_k", "top_p"])
async def test_integer_of_5000_digits_is_400(serve, engine, field):
    body = json.dumps(chat()).encode()[:-1] + f', "{field}": {"9" * 5000}}}'.encode()
    async with serve(engine) as client:
        r = await post(client, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("field", ["temperature", "top_p", "repetition_penalty", "seed", "top_k"])
async def test_integer_of_400_digits_is_422_naming_the_field(serve, engine, field):
    body = json.dumps(chat()).encode()[:-1] + f', "{field}": {"9" * 400}}}'.encode()
    async with serve(engine) as client:
        r = await post(client, body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["param"] == field and len(error["message"]) < 200


async def test_unicode_digits_in_content_length_do_not_crash(serve, engine):
    async with serve(engine) as client:
        r = await client.post(
            "/v1/chat/completions",
            content=json.dumps(chat()).encode(),
            headers={**JSON, "content-length": b"\xb2"},
        )
    assert r.status_code < 500


_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_field = st.sampled_from(
    [
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "repetition_penalty",
        "stream",
        "stream_options",
        "n",
        "logprobs",
        "tools",
        "response_format",
        "user",
    ]
)
_message = st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_calls"]),
    _values | st.sampled_from(["user", "system", "assistant", "tool"]),
    max_size=3,
)
_bodies = st.dictionaries(_field, _values, max_size=6) | st.fixed_dictionaries(
    {"model": st.just("scripted"), "messages": st.lists(_message, max_size=3)},
    optional={"temperature": _values, "seed": _values, "stop": _values},
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies | _values)
def test_parsers_raise_only_request_errors(body):
    config = ServerConfig(model_id="scripted")
    for parse in (parse_chat, parse_completion):
        try:
            parse(body, config)
        except RequestError as exc:
            assert 400 <= exc.status < 500


async def test_openapi_document_is_published(serve, engine):
    async with serve(engine) as client:
        r = await client.get("/openapi.json")
    assert r.status_code == 200
    document = r.json()
    assert document["openapi"].startswith("3.1")
    chat_schema = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    properties = chat_schema["content"]["application/json"]["schema"]["properties"]
    assert set(properties) >= {"model", "messages", "temperature", "seed", "stop"}
    assert properties["messages"]["items"]["properties"]["role"]["enum"] == sorted(
        ["system", "developer", "user", "assistant", "tool"]
    )
