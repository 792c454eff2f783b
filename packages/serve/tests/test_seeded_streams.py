"""A request's sampled reply depends on its seed, never on what it is batched with."""

import asyncio

import pytest

from riftco.nn import SamplingConfig
from riftco.serve import GenerationRequest
from riftco.serve.engine import TextDelta

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick", "hello", "lazy dog 01"]


def request(i: int) -> GenerationRequest:
    options = SamplingConfig(max_new_tokens=12, temperature=0.9, top_k=40, seed=1000 + i)
    return GenerationRequest(prompt=PROMPTS[i % 3] + " x" * (i % 4), options=options)


async def replies(engine, requests):
    async def one(r):
        parts = []
        async for event in engine.submit(r):
            if isinstance(event, TextDelta):
                parts.append(event.text)
        return "".join(parts)

    return await asyncio.gather(*(one(r) for r in requests))


@pytest.fixture
def batch_engine():
    """Engines over a model built here, on the backend current now (other tests swap it)."""
    import riftco.nn as nn
    import riftco.text as text
    from riftco.serve import BatchEngine
    from riftco.serve.scheduler import SchedulerLimits

    tokenizer = text.BpeTokenizer.train("the quick brown fox jumps over the lazy dog. " * 4, 290)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=96
    )
    model = nn.DecoderOnlyTransformer(config, seed=5)

    def make(**limits):
        return BatchEngine(
            model, tokenizer, model_id="tiny", page_size=8, limits=SchedulerLimits(**limits)
        )

    return make


def test_seeded_replies_alone_equal_replies_in_a_batch(batch_engine):
    n = 12
    batched = batch_engine(max_running=n)
    batched.start()
    try:
        together = asyncio.run(replies(batched, [request(i) for i in range(n)]))
    finally:
        batched.close()
    alone = []
    for i in range(n):
        engine = batch_engine(max_running=1)  # a fresh engine: no shared prefix pages
        engine.start()
        try:
            alone.append(asyncio.run(replies(engine, [request(i)]))[0])
        finally:
            engine.close()
    assert alone == together
    assert len(set(together)) > 1
