"""The sampler (greedy, temperature, top-k, top-p, seeds) and generation."""

from __future__ import annotations

import numpy as np
import pytest
from test_transformer import PRESETS

import riftco.nn as nn
from riftco.autograd import no_grad


def test_greedy_ties_go_to_the_lowest_id():
    cfg = nn.SamplingConfig()
    assert nn.sample_next(np.array([0.0, 3.0, 1.0, 3.0]), cfg) == 1
    assert nn.sample_next(np.array([5.0, 5.0]), cfg) == 0


def draws(logits, n=4000, **kw):
    cfg = nn.SamplingConfig(seed=0, **kw)
    rng = nn.sequence_rng(0, 0)
    return np.bincount([nn.sample_next(logits, cfg, rng) for _ in range(n)], minlength=len(logits))


def test_temperature_top_k_and_top_p():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    counts = draws(logits, temperature=1.0)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.03)
    assert (draws(logits, temperature=1.0, top_k=2)[:2] == 0).all()
    top_p = draws(logits, temperature=1.0, top_p=0.65)  # 0.4 + 0.3 reaches 0.65
    assert (top_p[:2] == 0).all() and abs(top_p[3] / top_p.sum() - 4 / 7) < 0.03
    assert (draws(logits, temperature=1.0, top_p=0.3)[:3] == 0).all()
    cold = draws(logits, temperature=0.05)
    assert cold[3] / cold.sum() > 0.99
    # Ties at the top-k boundary keep the lower id.
    assert (draws(np.zeros(4), temperature=1.0, top_k=2)[2:] == 0).all()


def test_config_validation():
    for bad in (dict(temperature=-1.0), dict(top_k=0), dict(top_p=0.0), dict(max_new_tokens=-1)):
        with pytest.raises(nn.ConfigError):
            nn.SamplingConfig(**bad)
    with pytest.raises(nn.ConfigError, match="generator"):
        nn.sample_next(np.zeros(3), nn.SamplingConfig(temperature=1.0), None)


@pytest.fixture(scope="module")
def model():
    return nn.DecoderOnlyTransformer(PRESETS["llama"], seed=21)


def test_greedy_generation_matches_the_full_forward(model):
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    results = nn.generate(model, prompts, nn.SamplingConfig(max_new_tokens=5))
    for prompt, result in zip(prompts, results):
        seq = list(prompt)
        for _ in range(5):
            with no_grad():
                seq.append(int(np.argmax(model([seq]).numpy()[0, -1])))
        assert result.tokens == seq[len(prompt) :]
        assert result.finish_reason == "length"


def test_seeded_sampling_is_per_sequence(model):
    cfg = nn.SamplingConfig(max_new_tokens=6, temperature=1.0, top_p=0.9, seed=5)
    one = nn.generate(model, [[1, 2], [3]], cfg)
    again = nn.generate(model, [[1, 2], [3]], cfg)
    assert one == again
    # A sequence's draws do not depend on what else is in the batch.
    assert nn.generate(model, [[1, 2]], cfg)[0] == one[0]
    other = nn.generate(
        model, [[1, 2], [3]], nn.SamplingConfig(max_new_tokens=6, temperature=1.0, seed=6)
    )
    assert other != one


def test_stop_ids_and_limits(model):
    greedy = nn.generate(model, [[1, 2, 3]], nn.SamplingConfig(max_new_tokens=4))[0]
    stop = greedy.tokens[2]
    first = greedy.tokens.index(stop)
    stopped = nn.generate(
        model, [[1, 2, 3]], nn.SamplingConfig(max_new_tokens=4, stop_ids=(stop,))
    )[0]
    assert stopped.tokens == greedy.tokens[:first] and stopped.finish_reason == "stop"
    assert nn.generate(model, [[1]], nn.SamplingConfig(max_new_tokens=0))[0].tokens == []
    with pytest.raises(nn.ConfigError, match="empty"):
        nn.generate(model, [[]], nn.SamplingConfig())
    with pytest.raises(nn.ConfigError, match="outside"):
        nn.generate(model, [[99]], nn.SamplingConfig())


def test_generation_slides_its_window_past_the_context(model):
    # Context 16: once it is full, the newest 8 tokens are replayed from position 0.
    assert nn.replay_tokens(16) == 8 and nn.replay_tokens(1) == 1
    prompts = [[1] * 14, [2, 3]]
    results = nn.generate(model, prompts, nn.SamplingConfig(max_new_tokens=30))
    for prompt, result in zip(prompts, results):
        assert len(result.tokens) == 30 and result.finish_reason == "length"
        seq, start = list(prompt), 0
        for _ in range(30):
            if len(seq) - start > 16:
                start = len(seq) - 8
            with no_grad():
                seq.append(int(np.argmax(model([seq[start:]]).numpy()[0, -1])))
        assert result.tokens == seq[len(prompt) :]


def test_vocabulary_limit_hides_padded_ids():
    logits = np.array([0.0, 1.0, 2.0, 9.0, 8.0])
    assert nn.sample_next(logits, nn.SamplingConfig(vocab_limit=3)) == 2
    assert nn.sample_next(logits, nn.SamplingConfig(vocab_limit=10)) == 3
    counts = draws(logits, temperature=50.0, vocab_limit=3)
    assert counts[:3].all() and not counts[3:].any()


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    cfg = nn.SamplingConfig(repetition_penalty=4.0)
    logits = np.array([3.0, 2.0, -1.0, -2.5], dtype=np.float32)
    assert nn.sample_next(logits, cfg, seen={0}) == 1  # 3 / 4 < 2
    assert nn.sample_next(logits, cfg, seen=()) == 0
    penalized = np.array([-10.0, -10.0, -1.0, -2.5])
    assert nn.sample_next(penalized, cfg, seen={2}) == 3  # -1 * 4 < -2.5
    # Ids outside the row (or beyond the vocabulary limit) are ignored.
    limited = nn.SamplingConfig(repetition_penalty=4.0, vocab_limit=2)
    assert nn.sample_next(logits, limited, seen={1, 3, 7}) == 0
    sampler = nn.TokenSampler(cfg)
    sampler.observe([0])
    assert sampler(logits) == 1 and sampler.seen == {0}
    assert nn.TokenSampler(nn.SamplingConfig()).seen == set()  # no penalty: nothing kept


def test_sampler_config_validation_of_the_new_fields():
    for bad in (
        dict(repetition_penalty=0.0),
        dict(repetition_penalty=float("nan")),
        dict(vocab_limit=0),
        dict(vocab_limit=2.5),
    ):
        with pytest.raises(nn.ConfigError):
            nn.SamplingConfig(**bad)


def test_generation_applies_the_penalty_and_the_limit(model):
    prompt = [1, 2, 3]
    penalized = nn.generate(
        model, [prompt], nn.SamplingConfig(max_new_tokens=8, repetition_penalty=1e6)
    )[0]
    tokens = penalized.tokens
    assert len(set(tokens)) == len(tokens) and not set(tokens) & set(prompt)
    # The same draws as the token sampler fed step by step with the full forward.
    sampler = nn.TokenSampler(nn.SamplingConfig(repetition_penalty=1e6))
    sampler.observe(prompt)
    seq = list(prompt)
    for _ in range(8):
        with no_grad():
            token = sampler(model([seq]).numpy()[0, -1])
        sampler.observe([token])
        seq.append(token)
    assert tokens == seq[len(prompt) :]
    limited = nn.generate(
        model,
        [prompt],
        nn.SamplingConfig(max_new_tokens=20, temperature=30.0, seed=2, vocab_limit=5),
    )[0]
    assert limited.tokens and max(limited.tokens) < 5


def test_sampling_without_filters_draws_what_the_ranked_path_draws():
    rng = np.random.default_rng(4)
    for trial in range(20):
        logits = rng.normal(0, 3, 40)
        logits[5] = logits[9]  # a tie
        plain = nn.SamplingConfig(temperature=0.7)
        ranked = nn.SamplingConfig(temperature=0.7, top_k=40)  # keeps every id, sorted path
        a, b = np.random.default_rng(trial), np.random.default_rng(trial)
        draws = [
            (nn.sample_next(logits, plain, a), nn.sample_next(logits, ranked, b)) for _ in range(50)
        ]
        assert all(x == y for x, y in draws)
