"""The server's share of the one inference policy: bundles load through
riftco-interchange's loader, requests map onto riftco-nn's SamplingConfig, and a
sequence stops where the tokenizer says text ends and never draws a padded id."""

import numpy as np
import pytest

import riftco.nn as nn
import riftco.text as text
from riftco.interchange import WeightsError, read_bundle, save_bundle, write_bundle
from riftco.serve import BatchEngine, ServerConfig
from riftco.serve.loading import engine_from_bundle

CORPUS = "the quick brown fox jumps over the lazy dog. " * 4 + "Hello, world! 0123456789"

CONFIG = ServerConfig(model_id="tiny")


class Rows:
    def __init__(self, array):
        self.array = array

    def numpy(self):
        return self.array


class Rigged:
    """The model with its first new token forced to ``first`` and every later one to
    ``then`` (``then`` None: left alone); the real forward still fills the cache."""

    def __init__(self, model, first, then=None):
        self.model, self.config = model, model.config
        self.first, self.then, self.calls = first, then, 0

    def forward_incremental(self, tokens, cache, seq_ids):
        logits = np.array(self.model.forward_incremental(tokens, cache, seq_ids).numpy())
        forced = self.first if self.calls == 0 else self.then
        if forced is not None:
            logits[:, forced] = 1e4
        self.calls += 1
        return Rows(logits)


def test_engine_from_bundle_refuses_a_wrong_shaped_tensor(tmp_path, tiny_model):
    save_bundle(tmp_path / "good.rift", *tiny_model)
    good = read_bundle(tmp_path / "good.rift", copy=True)
    tensors = dict(good.tensors)
    name = "blocks.0.attention.query.weight"
    tensors[name] = np.ascontiguousarray(tensors[name][:, :-1])
    write_bundle(tmp_path / "bad.rift", good.config, tensors, good.tokenizer_state)
    with pytest.raises(WeightsError, match=f"mis-shaped {name}"):
        engine_from_bundle(tmp_path / "bad.rift")
    engine = engine_from_bundle(tmp_path / "good.rift")
    assert engine.model.config == tiny_model[0].config


@pytest.mark.anyio
async def test_requests_stop_exactly_at_the_tokenizers_stop_ids(serve):
    # A special token outside the chat template ends neither a text nor a reply.
    specials = (*text.DEFAULT_SPECIAL_TOKENS, "<|tool|>")
    tokenizer = text.BpeTokenizer.train(CORPUS, vocab_size=300, special_tokens=specials)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=96
    )
    model = nn.DecoderOnlyTransformer(config, seed=5)
    plain = tokenizer.encode("e")[0]
    rigged = Rigged(model, plain, plain)
    engine = BatchEngine(rigged, tokenizer, model_id="tiny", page_size=8)
    completion = {"model": "tiny", "prompt": "the", "max_tokens": 3, "temperature": 0}
    chat = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "temperature": 0,
    }
    async with serve(engine, CONFIG) as client:
        for path, body, is_chat in (
            ("/v1/completions", completion, False),
            ("/v1/chat/completions", chat, True),
        ):
            stops = set(tokenizer.stop_ids(is_chat))
            for token in tokenizer.special_tokens.values():
                rigged.first, rigged.calls = token, 0
                reply = (await client.post(path, json=body)).json()
                stopped = reply["usage"]["completion_tokens"] == 0
                assert stopped == (token in stops), (path, token)
                assert reply["choices"][0]["finish_reason"] == ("stop" if stopped else "length")
    assert tokenizer.special_tokens["<|user|>"] in tokenizer.stop_ids(chat=True)
    assert tokenizer.special_tokens["<|tool|>"] not in tokenizer.stop_ids(chat=True)


@pytest.mark.anyio
async def test_a_padded_vocabulary_is_never_drawn(serve, tiny_model):
    tokenizer = tiny_model[1]
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size + 11, context_length=96
    )
    padded = tokenizer.vocab_size + 5
    rigged = Rigged(nn.DecoderOnlyTransformer(config, seed=5), padded, padded)
    engine = BatchEngine(rigged, tokenizer, model_id="tiny", page_size=8)
    body = {"model": "tiny", "prompt": "the", "max_tokens": 6, "temperature": 1.5, "seed": 2}
    async with serve(engine, CONFIG) as client:
        reply = (await client.post("/v1/completions", json=body)).json()
    assert reply["usage"]["completion_tokens"] == 6
    assert reply["choices"][0]["text"]  # ordinary tokens, not empty padded ones


@pytest.mark.anyio
async def test_openai_disabled_values_map_to_none(serve, engine):
    async with serve(engine) as client:
        for top_k, top_p in ((0, 1.0), (-1, 1), (None, None)):
            fields = {"model": "scripted", "prompt": "a", "top_k": top_k, "top_p": top_p}
            assert (await client.post("/v1/completions", json=fields)).status_code == 200
        await client.post(
            "/v1/completions",
            json={"model": "scripted", "prompt": "a", "top_k": 5, "top_p": 0.5, "max_tokens": 4},
        )
    for request in engine.seen[:3]:
        assert isinstance(request.options, nn.SamplingConfig)
        assert (request.options.top_k, request.options.top_p) == (None, None)
        assert request.options.repetition_penalty == 1.0
    last = engine.seen[3].options
    assert (last.top_k, last.top_p, last.max_new_tokens) == (5, 0.5, 4)
