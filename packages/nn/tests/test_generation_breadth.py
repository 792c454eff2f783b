"""The sampler's OpenAI breadth: presence and frequency penalties, logit bias,
log-probabilities, constraints (masks) and the seeds of parallel choices."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_transformer import PRESETS

import riftco.nn as nn
from riftco.autograd import no_grad
from riftco.nn.generation import constraint_mask, log_softmax, token_logprobs


@pytest.fixture(scope="module")
def model():
    return nn.DecoderOnlyTransformer(PRESETS["llama"], seed=21)


def test_presence_and_frequency_penalties_follow_openai_formula():
    rng = np.random.default_rng(0)
    for _ in range(50):
        logits = rng.normal(0, 1, 12).astype(np.float32)
        counts = {int(t): int(c) for t, c in zip(rng.integers(0, 12, 4), rng.integers(1, 4, 4))}
        presence, frequency = rng.uniform(-2, 2, 2)
        cfg = nn.SamplingConfig(presence_penalty=presence, frequency_penalty=frequency)
        expected = logits.astype(np.float64)
        for t, c in counts.items():
            expected[t] -= presence + frequency * c
        assert nn.sample_next(logits, cfg, counts=counts) == int(np.argmax(expected))


def test_penalties_count_generated_tokens_only():
    cfg = nn.SamplingConfig(presence_penalty=2.0, frequency_penalty=0.5)
    sampler = nn.TokenSampler(cfg)
    sampler.observe([0, 0, 1])  # the prompt is not counted
    logits = np.array([1.0, 0.9, 0.0])
    assert sampler(logits) == 0
    sampler.accept(0)
    assert sampler.counts == {0: 1}
    assert sampler(logits) == 1  # 1 - 2 - 0.5 < 0.9
    sampler.accept(1)
    sampler.accept(1)
    assert sampler.counts == {0: 1, 1: 2}
    assert sampler(logits) == 2  # 0.9 - 2 - 1.0 < 0


def test_logit_bias_is_added_before_temperature():
    rng = np.random.default_rng(1)
    for trial in range(10):
        logits = rng.normal(0, 2, 30)
        bias = {3: 5.0, 7: -100.0, 11: 1.5}
        added = logits.copy()
        for t, b in bias.items():
            added[t] += b
        for extra in ({}, {"top_k": 10}, {"top_p": 0.8}):
            biased = nn.SamplingConfig(temperature=1.7, logit_bias=bias, **extra)
            plain = nn.SamplingConfig(temperature=1.7, **extra)
            a, b_ = nn.sequence_rng(trial, 0), nn.sequence_rng(trial, 0)
            ours = [nn.sample_next(logits, biased, a) for _ in range(40)]
            reference = [nn.sample_next(added, plain, b_) for _ in range(40)]
            assert ours == reference
    assert nn.sample_next(np.zeros(4), nn.SamplingConfig(logit_bias={2: 100})) == 2
    assert nn.sample_next(np.array([3.0, 0.0]), nn.SamplingConfig(logit_bias={0: -100})) == 1
    with pytest.raises(nn.ConfigError, match="vocabulary has 4"):
        nn.sample_next(np.zeros(4), nn.SamplingConfig(logit_bias={4: 1.0}))


def test_validation_of_the_openai_fields():
    bad = (
        dict(presence_penalty=2.5),
        dict(frequency_penalty=-3),
        dict(presence_penalty=float("nan")),
        dict(frequency_penalty=True),
        dict(logit_bias={-1: 1.0}),
        dict(logit_bias={"3": 1.0}),
        dict(logit_bias={3: 100.5}),
        dict(logit_bias={3: float("inf")}),
        dict(logit_bias=[(1, 2, 3)]),
        dict(logit_bias=5),
        dict(logprobs=21),
        dict(logprobs=-1),
        dict(logprobs=True),
        dict(logprobs=2.0),
    )
    for fields in bad:
        with pytest.raises(nn.ConfigError) as info:
            nn.SamplingConfig(**fields)
        assert "found" in str(info.value)
    cfg = nn.SamplingConfig(logit_bias={5: 1, 2: -3.5}, logprobs=20)
    assert cfg.logit_bias == ((2, -3.5), (5, 1.0))
    hash(cfg)  # still a value


def test_token_logprobs_are_the_raw_distribution():
    logits = np.array([2.0, 1.0, 2.0, -1.0, 0.5], dtype=np.float32)
    entry = token_logprobs(logits, 1, 3)
    reference = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum())
    assert entry.token == 1 and entry.logprob == pytest.approx(reference[1], abs=1e-12)
    assert [i for i, _ in entry.top] == [0, 2, 1]  # descending, ties toward lower ids
    np.testing.assert_allclose([p for _, p in entry.top], reference[[0, 2, 1]], atol=1e-12)
    assert token_logprobs(logits, 4, 0).top == ()
    # The penalties, bias and temperature do not change what is reported.
    cfg = nn.SamplingConfig(
        temperature=0.5, seed=0, logprobs=2, logit_bias={3: 50}, presence_penalty=1.0
    )
    sampler = nn.TokenSampler(cfg)
    token = sampler(logits)
    assert token == 3
    assert sampler.last == token_logprobs(logits, 3, 2)
    assert np.isclose(np.exp(log_softmax(logits)).sum(), 1.0)


def test_generation_logprobs_equal_log_softmax_of_the_forward(model):
    prompt = [1, 2, 3]
    cfg = nn.SamplingConfig(max_new_tokens=6, temperature=1.0, seed=3, logprobs=4)
    result = nn.generate(model, [prompt], cfg)[0]
    assert result.logprobs is not None and len(result.logprobs) == len(result.tokens)
    seq = list(prompt)
    for token, entry in zip(result.tokens, result.logprobs):
        with no_grad():
            row = model([seq]).numpy()[0, -1].astype(np.float64)
        reference = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        assert entry.token == token
        assert entry.logprob == pytest.approx(reference[token], abs=1e-4)
        assert [i for i, _ in entry.top] == list(np.argsort(-reference, kind="stable")[:4])
        np.testing.assert_allclose(
            [p for _, p in entry.top], np.sort(reference)[::-1][:4], atol=1e-4
        )
        seq.append(token)
    # Asking for logprobs changes no draw.
    same = nn.generate(model, [prompt], dataclasses.replace(cfg, logprobs=None))[0]
    assert same.tokens == result.tokens and same.logprobs is None


class EvenOnly:
    """Allows the even ids (and records what it was advanced past)."""

    def __init__(self, vocab, as_ids=False):
        self.vocab = vocab
        self.as_ids = as_ids
        self.advanced = []

    def allowed(self):
        if self.as_ids:
            return list(range(0, self.vocab, 2))
        mask = np.zeros(self.vocab, dtype=bool)
        mask[::2] = True
        return mask

    def advance(self, token_id):
        assert token_id % 2 == 0
        self.advanced.append(token_id)


def test_constraints_mask_greedy_and_sampled_draws(model):
    vocab = model.config.vocab_size
    for cfg in (
        nn.SamplingConfig(max_new_tokens=8),
        nn.SamplingConfig(max_new_tokens=8, temperature=5.0, seed=1),
        nn.SamplingConfig(max_new_tokens=8, temperature=5.0, seed=1, top_k=5),
        nn.SamplingConfig(max_new_tokens=8, temperature=5.0, seed=1, top_p=0.5),
    ):
        constraints = [EvenOnly(vocab), EvenOnly(vocab, as_ids=True)]
        results = nn.generate(model, [[1, 2], [3]], cfg, constraints=constraints)
        for result, constraint in zip(results, constraints):
            assert len(result.tokens) == 8 and all(t % 2 == 0 for t in result.tokens)
            assert constraint.advanced == result.tokens
    with pytest.raises(nn.ConfigError, match="one constraint"):
        nn.generate(model, [[1]], nn.SamplingConfig(), constraints=[])


def test_a_grammar_gives_each_prompt_its_own_state(model):
    vocab = model.config.vocab_size

    class Grammar:
        def __init__(self):
            self.states = []

        def start(self):
            self.states.append(EvenOnly(vocab))
            return self.states[-1]

    grammar = Grammar()
    cfg = nn.SamplingConfig(max_new_tokens=4, temperature=2.0, seed=3)
    results = nn.generate(model, [[1], [2, 3]], cfg, grammar=grammar)
    assert [s.advanced for s in grammar.states] == [r.tokens for r in results]
    with pytest.raises(nn.ConfigError, match="start"):
        nn.generate(model, [[1]], cfg, grammar=object())
    with pytest.raises(nn.ConfigError, match="not both"):
        nn.generate(model, [[1]], cfg, constraints=[None], grammar=grammar)


def test_a_stop_id_ends_a_constrained_sequence_only_where_allowed(model):
    free = nn.generate(model, [[1, 2, 3]], nn.SamplingConfig(max_new_tokens=3))[0]
    stop = free.tokens[0]
    vocab = model.config.vocab_size

    class NoStop:
        def allowed(self):
            mask = np.ones(vocab, dtype=bool)
            mask[stop] = False
            return mask

        def advance(self, token_id):
            pass

    cfg = nn.SamplingConfig(max_new_tokens=3, stop_ids=(stop,))
    assert nn.generate(model, [[1, 2, 3]], cfg)[0].finish_reason == "stop"
    held = nn.generate(model, [[1, 2, 3]], cfg, constraints=[NoStop()])[0]
    assert held.finish_reason == "length" and stop not in held.tokens


def test_a_constraint_that_allows_nothing_ends_the_sequence(model):
    class Three:
        """Any three tokens, then nothing (a complete document)."""

        def __init__(self):
            self.taken = 0

        def allowed(self):
            return np.full(model.config.vocab_size, self.taken < 3)

        def advance(self, token_id):
            self.taken += 1

    cfg = nn.SamplingConfig(max_new_tokens=10, temperature=1.0, seed=0)
    (result,) = nn.generate(model, [[1, 2]], cfg, constraints=[Three()])
    assert len(result.tokens) == 3 and result.finish_reason == "stop"
    sampler = nn.TokenSampler(cfg, constraint=Three())
    for _ in range(3):
        sampler.accept(sampler(np.zeros(model.config.vocab_size)))
    assert sampler.draw(np.zeros(model.config.vocab_size)) is None
    with pytest.raises(nn.ConfigError, match="allows no token"):
        sampler(np.zeros(model.config.vocab_size))


def test_an_all_true_mask_draws_what_no_mask_draws():
    rng = np.random.default_rng(7)
    for trial in range(10):
        logits = rng.normal(0, 3, 40)
        mask = np.ones(40, dtype=bool)
        for extra in ({}, {"top_k": 7}, {"top_p": 0.9}):
            cfg = nn.SamplingConfig(temperature=0.8, **extra)
            a, b = np.random.default_rng(trial), np.random.default_rng(trial)
            assert [nn.sample_next(logits, cfg, a) for _ in range(30)] == [
                nn.sample_next(logits, cfg, b, mask=mask) for _ in range(30)
            ]


def test_constraint_masks_are_checked():
    assert constraint_mask(np.array([True, False]), 4).tolist() == [True, False, False, False]
    assert constraint_mask([0, 3, 9, -1], 4).tolist() == [True, False, False, True]
    assert constraint_mask(np.ones(6, dtype=bool), 4).tolist() == [True] * 4
    with pytest.raises(nn.ConfigError, match="bool array or a sequence"):
        constraint_mask(object(), 4)
    with pytest.raises(nn.ConfigError, match="1-d"):
        constraint_mask(np.ones((2, 2), dtype=bool), 4)
    with pytest.raises(nn.ConfigError, match="allows no token"):
        nn.sample_next(np.zeros(3), nn.SamplingConfig(), mask=np.zeros(3, dtype=bool))


def test_choice_seeds_follow_seed_plus_index():
    assert nn.choice_seed(None, 3) is None
    assert nn.choice_seed(5, 0) == 5 and nn.choice_seed(5, 3) == 8
    assert nn.choice_seed((1 << 64) - 1, 2) == 1


def test_sequences_draw_alone_what_they_draw_batched(model):
    cfg = nn.SamplingConfig(
        max_new_tokens=5, temperature=1.3, seed=9, presence_penalty=1.0, logprobs=1
    )
    batched = nn.generate(model, [[4, 5], [4, 5], [6]], cfg)
    assert nn.generate(model, [[4, 5]], cfg)[0] == batched[0]
    assert batched[0].tokens != batched[1].tokens or batched[0].logprobs != batched[1].logprobs
