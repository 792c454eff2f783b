"""Chats longer than the context: ``truncation: "auto"`` drops the oldest turns."""

from __future__ import annotations

import pytest

from riftco.serve import RequestError
from riftco.serve.app import DROPPED_HEADER
from riftco.serve.engine import ChatMessage
from riftco.serve.fitting import fit_chat, reply_room

pytestmark = pytest.mark.anyio


def words(messages):
    return [0] * sum(len(m.content.split()) + 1 for m in messages)


def chat(turns, system="be brief"):
    out = [ChatMessage("system", system)] if system else []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(ChatMessage(role, f"turn {i} " + "w " * 8))
    return out  # each turn is 11 "tokens", the system message 3


def test_a_chat_that_fits_is_kept_whole():
    ids, dropped = fit_chat(chat(3), words, context=64, max_new_tokens=8)
    assert dropped == 0 and len(ids) == 3 + 3 * 11


def test_the_oldest_turns_go_and_the_system_prompt_stays():
    messages = chat(9)  # 3 + 99 tokens
    kept = []

    def encode(chosen):
        kept.append(list(chosen))
        return words(chosen)

    ids, dropped = fit_chat(messages, encode, context=64, max_new_tokens=100)
    assert reply_room(64, 100) == 16  # 48 tokens for the prompt: the system and 4 turns at most
    final = next((c for c in reversed(kept) if len(words(c)) == len(ids)), None)
    assert dropped == 6 and len(ids) == 3 + 3 * 11  # what is left starts at a user turn
    assert final is not None and final[0].role == "system" and final[1].role == "user"
    assert len(kept) <= 1 + 4  # bisection: a handful of encodings, not one per turn


def test_the_newest_message_alone_too_long_is_refused():
    messages = [ChatMessage("system", "s"), ChatMessage("user", "w " * 80)]
    with pytest.raises(RequestError, match="newest message alone"):
        fit_chat(messages, words, context=64, max_new_tokens=8)
    # With no room left for a reply, the newest message alone is still served.
    many = [*chat(4), ChatMessage("user", "w " * 56)]
    ids, dropped = fit_chat(many, words, context=64, max_new_tokens=8)
    assert dropped == 4 and len(ids) == 3 + 57


@pytest.fixture
def engine_96():
    """A BatchEngine of its own (context 96), apart from the session's shared model."""
    import riftco.nn as nn
    import riftco.text as text
    from riftco.serve import BatchEngine

    tokenizer = text.BpeTokenizer.train("the quick brown fox jumps. " * 8, vocab_size=300)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=96
    )
    model = nn.DecoderOnlyTransformer(config, seed=5, backend="cpu")
    return BatchEngine(model, tokenizer, model_id="tiny", page_size=8)


async def test_the_api_drops_turns_only_when_asked(serve, engine_96):
    engine = engine_96
    long_chat = [{"role": "system", "content": "Answer."}]
    for i in range(12):
        role = "user" if i % 2 == 0 else "assistant"
        long_chat.append({"role": role, "content": f"the quick brown fox number {i}"})
    body = {"model": "tiny", "messages": long_chat, "max_tokens": 4, "temperature": 0}
    async with serve(engine) as client:
        refused = await client.post("/v1/chat/completions", json=body)
        fitted = await client.post("/v1/chat/completions", json={**body, "truncation": "auto"})
        streamed = await client.post(
            "/v1/chat/completions", json={**body, "truncation": "auto", "stream": True}
        )
        short = await client.post(
            "/v1/chat/completions",
            json={**body, "messages": long_chat[:2], "truncation": "auto"},
        )
        bad = await client.post("/v1/chat/completions", json={**body, "truncation": "yes"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert fitted.status_code == 200, fitted.text
    dropped = int(fitted.headers[DROPPED_HEADER])
    assert 0 < dropped < 12 and dropped % 2 == 0
    assert fitted.json()["usage"]["prompt_tokens"] <= engine.max_context
    assert streamed.status_code == 200 and streamed.headers[DROPPED_HEADER] == str(dropped)
    assert short.status_code == 200 and DROPPED_HEADER not in short.headers
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "truncation"


async def test_the_scripted_engine_fits_by_words(serve):
    from riftco.testing.serve import ScriptedEngine

    engine = ScriptedEngine(model_id="scripted", max_context=12)
    messages = [{"role": "system", "content": "s"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "a b c"} for i in range(5)
    ]
    body = {"model": "scripted", "messages": messages, "truncation": "auto", "max_tokens": 2}
    async with serve(engine) as client:
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and int(r.headers[DROPPED_HEADER]) >= 2
    assert engine.seen[-1].messages[0].role == "system"
