"""Greedy draws on a backend with ``decode_device_sampling``: a session whose logits
were left on the device reads back only the argmax ids, the same tokens as the host
sampler; every other draw reads the logits and samples on the host. The stand-in
backend is the CPU backend declaring the attribute and recording each read."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
from riftco.nn.session import device_greedy
from riftco.tensor.cpu import CpuBackend

CONFIG = nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=97, context_length=40)
PROMPTS = [[5, 9, 1, 4], [7], [3, 3, 8, 2, 6, 0, 11]]


class Reading(CpuBackend):
    """The CPU backend, recording the shape and dtype of every read to the host."""

    name = "cpu-reading"
    sampling = True

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[tuple[int, ...], str]] = []

    @property
    def decode_device_sampling(self) -> bool:
        return self.sampling

    def to_numpy(self, x, shape, dtype):
        self.reads.append((tuple(shape), dtype.value))
        return super().to_numpy(x, shape, dtype)


def logit_reads(backend: Reading) -> list[tuple[tuple[int, ...], str]]:
    return [r for r in backend.reads if r[0][-1:] == (CONFIG.vocab_size,)]


def id_reads(backend: Reading) -> list[tuple[tuple[int, ...], str]]:
    return [r for r in backend.reads if r[1] == "int64" and len(r[0]) == 1]


@pytest.fixture
def models():
    backend = Reading()
    return (
        nn.DecoderOnlyTransformer(CONFIG, seed=4),
        nn.DecoderOnlyTransformer(CONFIG, seed=4, backend=backend),
        backend,
    )


def test_greedy_generation_reads_only_the_ids_and_keeps_the_tokens(models):
    cpu, dev, backend = models
    config = nn.SamplingConfig(max_new_tokens=12)
    want = [r.tokens for r in nn.generate(cpu, PROMPTS, config)]
    backend.reads.clear()
    got = [r.tokens for r in nn.generate(dev, PROMPTS, config)]
    assert got == want
    assert logit_reads(backend) == []
    # one read of the ids a step (the prefill's included), 8 bytes a row
    ids = id_reads(backend)
    assert len(ids) == 12 and ids[0] == ((3,), "int64")


@pytest.mark.parametrize(
    "config",
    [
        nn.SamplingConfig(max_new_tokens=6, temperature=0.8, top_k=5, seed=2),
        nn.SamplingConfig(max_new_tokens=6, logprobs=2),
        nn.SamplingConfig(max_new_tokens=6, repetition_penalty=1.3),
        nn.SamplingConfig(max_new_tokens=6, frequency_penalty=0.5),
        nn.SamplingConfig(max_new_tokens=6, logit_bias={3: 5.0}),
        nn.SamplingConfig(max_new_tokens=6, vocab_limit=50),
    ],
    ids=["seeded", "logprobs", "repetition", "frequency", "bias", "vocab-limit"],
)
def test_other_configurations_sample_on_the_host(models, config):
    cpu, dev, backend = models
    assert not device_greedy(config, None, CONFIG.vocab_size)
    want = nn.generate(cpu, PROMPTS, config)
    backend.reads.clear()
    got = nn.generate(dev, PROMPTS, config)
    assert [r.tokens for r in got] == [r.tokens for r in want]
    assert [r.logprobs for r in got] == [r.logprobs for r in want]
    assert logit_reads(backend)  # the logits came to the host sampler


def test_a_constraint_keeps_greedy_on_the_host():
    class Odd:
        def allowed(self):
            return [t for t in range(CONFIG.vocab_size) if t % 2]

        def advance(self, token_id):
            return None

    assert device_greedy(nn.SamplingConfig(), None, CONFIG.vocab_size)
    assert not device_greedy(nn.SamplingConfig(), Odd(), CONFIG.vocab_size)
    backend = Reading()
    dev = nn.DecoderOnlyTransformer(CONFIG, seed=4, backend=backend)
    out = nn.generate(dev, PROMPTS[:1], nn.SamplingConfig(max_new_tokens=5), [Odd()])
    assert all(t % 2 for t in out[0].tokens)
    assert logit_reads(backend)


def test_a_backend_without_device_sampling_reads_the_logits(models):
    cpu, dev, backend = models
    backend.sampling = False
    config = nn.SamplingConfig(max_new_tokens=5)
    want = [r.tokens for r in nn.generate(cpu, PROMPTS, config)]
    backend.reads.clear()
    assert [r.tokens for r in nn.generate(dev, PROMPTS, config)] == want
    assert len(logit_reads(backend)) == 5 and id_reads(backend) == []


def test_logits_left_on_the_device_are_read_when_asked(models):
    cpu, dev, backend = models
    ref = nn.DecodeSessionPool(cpu, pages=8).session()
    pool = nn.DecodeSessionPool(dev, pages=8)
    session = pool.session()
    want = ref.prefill(PROMPTS[0])
    assert nn.prefill_many([session], [PROMPTS[0]], logits=False) is None
    backend.reads.clear()
    token = session.sample(nn.SamplingConfig())
    assert token == int(np.argmax(want)) and logit_reads(backend) == []
    np.testing.assert_array_equal(session.logits, want)  # read now, once
    assert len(logit_reads(backend)) == 1
    assert session.sample(nn.SamplingConfig()) == token  # from the host row: no new read
    assert len(logit_reads(backend)) == 1
    nn.step_many([session], [token], logits=False)
    np.testing.assert_array_equal(session.logits, ref.step(token))
    nn.step_many([session], [1], logits=False)
    session.rollback(1)
    assert session.logits is None
    with pytest.raises(nn.SessionError, match="no logits"):
        session.sample(nn.SamplingConfig())
    assert session.step(2).shape == (CONFIG.vocab_size,)  # the default reads, as before
