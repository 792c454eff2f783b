"""Sampling breadth through the official ``openai`` client over a real model: ``n``
(seeded choices equal single requests seeded seed + i; prompt pages computed once),
``logprobs`` / ``top_logprobs`` in both OpenAI shapes (equal to ``log_softmax`` of the
model's own forward), the penalties, ``logit_bias``, ``echo`` and lists of prompts,
streamed and not."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import numpy as np
import pytest

import riftco.nn as nn
from riftco.autograd import no_grad
from riftco.serve import BatchEngine, ServerConfig, create_app
from riftco.serve.engine import Finished, GenerationRequest, TextDelta
from riftco.serve.scheduler import SchedulerLimits

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "the quick brown fox"}]
PROMPT = "the quick brown fox jumps over"


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


@pytest.fixture(scope="module")
def tokenizer():
    import riftco.text as text

    corpus = "the quick brown fox jumps over the lazy dog. " * 4 + "Hello, world! 0123456789 é ü"
    return text.BpeTokenizer.train(corpus, vocab_size=300)


@pytest.fixture
def tiny_model(tokenizer):
    """A tiny model built on the backend current now (other tests swap it)."""
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=96
    )
    return nn.DecoderOnlyTransformer(config, seed=5), tokenizer


@pytest.fixture
def engine(tiny_model):
    model, tokenizer = tiny_model
    return BatchEngine(
        model, tokenizer, model_id="tiny", page_size=8, limits=SchedulerLimits(max_running=8)
    )


def reference_logprobs(model, ids):
    """log_softmax (float64) of the model's full forward at the last position."""
    with no_grad():
        row = model([ids]).numpy()[0, -1].astype(np.float64)
    return row - (row.max() + np.log(np.exp(row - row.max()).sum()))


def chat_ids(tokenizer):
    return list(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True).ids)


async def chat_texts(client, stream, **fields):
    """The choices' texts (by index) of one chat request, streamed or not."""
    if not stream:
        reply = await client.chat.completions.create(model="tiny", messages=MESSAGES, **fields)
        return {c.index: c.message.content for c in reply.choices}, reply
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    async for chunk in await client.chat.completions.create(
        model="tiny", messages=MESSAGES, stream=True, **fields
    ):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert set(finish) == set(texts)
    return texts, None


@pytest.mark.parametrize("stream", [False, True])
async def test_n_seeded_choices_each_equal_a_single_request_seeded_seed_plus_i(engine, stream):
    fields = dict(temperature=1.0, top_p=0.95, max_tokens=10)
    async with openai_client(engine) as client:
        together, _ = await chat_texts(client, stream, n=4, seed=77, **fields)
        alone = [(await chat_texts(client, False, seed=77 + i, **fields))[0][0] for i in range(4)]
    assert [together[i] for i in range(4)] == alone
    assert len(set(alone)) > 1  # the choices differ from each other


async def test_n_choices_compute_the_prompt_pages_once(tiny_model):
    model, tokenizer = tiny_model
    engine = BatchEngine(model, tokenizer, model_id="tiny", page_size=8)
    prompt = tokenizer.encode("the lazy dog jumps over the quick brown fox. " * 2)
    length = len(prompt)
    shared = 8 * ((length - 1) // 8)
    assert shared >= 16
    engine.start()
    try:
        options = nn.SamplingConfig(max_new_tokens=3, temperature=1.0, seed=1)
        requests = [GenerationRequest(prompt=tuple(prompt), options=options)] * 4
        streams = engine.submit_group(requests)
        for stream in streams:
            async for event in stream:
                if isinstance(event, Finished):
                    assert event.prompt_tokens == length
        scheduler = engine.scheduler
        assert scheduler.prompt_tokens_total == length + 3 * (length - shared)
        # The full prompt pages are held once in the pool, not once per choice.
        assert engine.cache.allocator.cached == length // 8
    finally:
        engine.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_logprobs_equal_log_softmax_of_the_forward(engine, tiny_model, stream):
    model, tokenizer = tiny_model
    fields = dict(max_tokens=6, temperature=1.0, seed=3, logprobs=True, top_logprobs=5)
    async with openai_client(engine) as client:
        if stream:
            content = []
            async for chunk in await client.chat.completions.create(
                model="tiny", messages=MESSAGES, stream=True, **fields
            ):
                for c in chunk.choices:
                    if c.logprobs is not None:
                        content.extend(c.logprobs.content)
        else:
            reply = await client.chat.completions.create(model="tiny", messages=MESSAGES, **fields)
            content = reply.choices[0].logprobs.content
    ids = chat_ids(tokenizer)
    assert content
    for entry in content:
        reference = reference_logprobs(model, ids)
        token = next(
            t for t in range(tokenizer.vocab_size) if tokenizer.token_bytes(t) == bytes(entry.bytes)
        )
        assert entry.logprob == pytest.approx(reference[token], abs=1e-4)
        assert len(entry.top_logprobs) == 5
        top = np.sort(reference[: tokenizer.vocab_size])[::-1][:5]
        np.testing.assert_allclose([t.logprob for t in entry.top_logprobs], top, atol=1e-4)
        assert entry.token == tokenizer.token_bytes(token).decode("utf-8", "replace")
        ids.append(token)


@pytest.mark.parametrize("stream", [False, True])
async def test_completion_logprobs_in_the_legacy_shape(engine, tiny_model, stream):
    model, tokenizer = tiny_model
    fields = dict(max_tokens=8, logprobs=3, temperature=0)
    async with openai_client(engine) as client:
        if stream:
            text, tokens, token_logprobs, top, offsets = "", [], [], [], []
            async for chunk in await client.completions.create(
                model="tiny", prompt=PROMPT, stream=True, **fields
            ):
                for c in chunk.choices:
                    text += c.text
                    if c.logprobs is not None:
                        tokens += c.logprobs.tokens
                        token_logprobs += c.logprobs.token_logprobs
                        top += c.logprobs.top_logprobs
                        offsets += c.logprobs.text_offset
        else:
            reply = await client.completions.create(model="tiny", prompt=PROMPT, **fields)
            choice = reply.choices[0]
            text = choice.text
            tokens, token_logprobs = choice.logprobs.tokens, choice.logprobs.token_logprobs
            top, offsets = choice.logprobs.top_logprobs, choice.logprobs.text_offset
    ids = list(tokenizer.encode(PROMPT))
    greedy = nn.generate(
        model,
        [ids],
        nn.SamplingConfig(
            max_new_tokens=8,
            vocab_limit=tokenizer.vocab_size,
            stop_ids=tokenizer.stop_ids(False),
            logprobs=3,
        ),
    )[0]
    assert len(tokens) == len(greedy.tokens) == len(offsets) == len(top)
    assert "".join(tokens) == text
    for k, (entry, offset) in enumerate(zip(greedy.logprobs, offsets)):
        assert token_logprobs[k] == pytest.approx(entry.logprob, abs=1e-9)
        assert text[offset : offset + len(tokens[k])] == tokens[k]
        # One {text: logprob} object per token (tokens of equal text share a key).
        named: dict[str, set[float]] = {}
        for i, p in entry.top:
            named.setdefault(tokenizer.token_bytes(i).decode("utf-8", "replace"), set()).add(p)
        assert set(top[k]) == set(named)
        assert all(top[k][name] in values for name, values in named.items())


@pytest.mark.parametrize("stream", [False, True])
async def test_penalties_and_bias_draw_what_the_sampler_draws(engine, tiny_model, stream):
    model, tokenizer = tiny_model
    ids = list(tokenizer.encode(PROMPT))
    cases = [
        dict(frequency_penalty=1.5, presence_penalty=0.5),
        dict(presence_penalty=-2.0),
        dict(logit_bias={str(ids[0]): 100}),
        dict(logit_bias={str(t): -100 for t in range(0, 200)}, frequency_penalty=0.3),
    ]
    async with openai_client(engine) as client:
        for fields in cases:
            if stream:
                text = ""
                async for chunk in await client.completions.create(
                    model="tiny", prompt=PROMPT, max_tokens=8, temperature=0, stream=True, **fields
                ):
                    text += "".join(c.text for c in chunk.choices)
            else:
                reply = await client.completions.create(
                    model="tiny", prompt=PROMPT, max_tokens=8, temperature=0, **fields
                )
                text = reply.choices[0].text
            bias = {int(k): v for k, v in fields.pop("logit_bias", {}).items()}
            expected = nn.generate(
                model,
                [ids],
                nn.SamplingConfig(
                    max_new_tokens=8,
                    vocab_limit=tokenizer.vocab_size,
                    stop_ids=tokenizer.stop_ids(False),
                    logit_bias=bias,
                    **fields,
                ),
            )[0]
            assert text == tokenizer.decode(expected.tokens)
    assert tokenizer.decode(expected.tokens)  # the last case still produced text


async def test_logit_bias_outside_the_vocabulary_is_400(engine, tiny_model):
    _, tokenizer = tiny_model
    async with openai_client(engine) as client:
        with pytest.raises(openai.BadRequestError, match="logit_bias"):
            await client.completions.create(
                model="tiny", prompt="a", logit_bias={str(tokenizer.vocab_size): 5}
            )


@pytest.mark.parametrize("stream", [False, True])
async def test_echo_and_lists_of_prompts_prompt_major(engine, tiny_model, stream):
    _, tokenizer = tiny_model
    prompts = ["the lazy dog", tokenizer.encode("hello, world")]
    fields = dict(max_tokens=5, temperature=1.0, seed=11, n=2, echo=True)
    async with openai_client(engine) as client:
        if stream:
            texts: dict[int, str] = {}
            firsts: dict[int, str] = {}
            async for chunk in await client.completions.create(
                model="tiny", prompt=prompts, stream=True, **fields
            ):
                for c in chunk.choices:
                    firsts.setdefault(c.index, c.text)
                    texts[c.index] = texts.get(c.index, "") + c.text
            assert firsts[0] == "the lazy dog" and firsts[2] == "hello, world"
        else:
            reply = await client.completions.create(model="tiny", prompt=prompts, **fields)
            texts = {c.index: c.text for c in reply.choices}
            assert reply.usage.prompt_tokens == len(tokenizer.encode("the lazy dog")) + len(
                prompts[1]
            )
        singles = {}
        for p, prompt in enumerate(prompts):
            for i in range(2):
                one = await client.completions.create(
                    model="tiny",
                    prompt=prompt,
                    max_tokens=5,
                    temperature=1.0,
                    seed=11 + i,
                    echo=True,
                )
                singles[p * 2 + i] = one.choices[0].text
    assert sorted(texts) == [0, 1, 2, 3]
    assert texts == singles
    assert texts[0].startswith("the lazy dog") and texts[3].startswith("hello, world")


async def test_the_engine_sends_logprobs_with_the_text_they_released(tiny_model):
    model, tokenizer = tiny_model
    engine = BatchEngine(model, tokenizer, model_id="tiny", page_size=8)
    engine.start()
    try:
        options = nn.SamplingConfig(max_new_tokens=12, logprobs=0)
        stream = engine.submit(GenerationRequest(prompt=PROMPT, options=options, stop=("o",)))
        text, entries = "", []
        async for event in stream:
            if isinstance(event, TextDelta):
                text += event.text
                entries.extend(event.logprobs)
                assert not event.text or event.logprobs  # text comes with its tokens
    finally:
        engine.close()
    assert "o" not in text
    assert all(e.top == () for e in entries)
    assert "".join(e.token for e in entries).startswith(text)


def test_the_openapi_document_lists_the_new_fields():
    from riftco.serve.openapi import openapi_document

    paths = openapi_document(ServerConfig(max_choices=8))["paths"]

    def fields(path):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return body["properties"]

    chat, completion = fields("/v1/chat/completions"), fields("/v1/completions")
    common = {"n", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs"}
    assert common <= set(chat) and common <= set(completion)
    assert chat["logprobs"]["type"] == ["boolean", "null"] and "top_logprobs" in chat
    assert completion["logprobs"]["maximum"] == 20 and "echo" in completion
    assert chat["n"]["maximum"] == 8 and "echo" not in chat
