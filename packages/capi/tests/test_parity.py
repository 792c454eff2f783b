"""The C ABI against riftco-nn on the same bundle: logits, greedy and seeded tokens over
64 steps (the window slides: the context is 32), the sampler's draws, batched steps,
rollback."""

from __future__ import annotations

import numpy as np
import pytest
from riftco_ctypes import Model, Sampler, generate, step_batch

from riftco.interchange import load_bundle
from riftco.nn.generation import SamplingConfig, sample_next, sequence_rng
from riftco.nn.generation import generate as nn_generate

#: riftco-nn runs a prompt op by op (batched products), the C ABI through the whole-step
#: decoder: the logits agree to this fraction of the largest logit.
PROMPT_TOLERANCE = 2e-5

PROMPT = [5, 17, 42, 99, 3, 250, 7]


def test_abi_version(lib):
    assert lib.dll.riftco_abi_version() == (1 << 16) | 0


def test_config_and_identity(lib, bundle):
    runnable = load_bundle(bundle)
    model = Model(lib, bundle)
    c, r = model.config, runnable.config
    assert (c.vocab_size, c.context_length, c.d_model, c.n_layers, c.n_heads, c.kv_heads) == (
        r.vocab_size,
        r.context_length,
        r.d_model,
        r.n_layers,
        r.n_heads,
        r.n_kv_heads,
    )
    assert c.rotary == (r.positions == "rotary") and c.d_ff == r.d_ff
    assert model.artifact_id() == runnable.artifact_id
    model.close()


def test_prompt_and_step_logits_match_riftco_nn(lib, bundle):
    runnable = load_bundle(bundle)
    model = Model(lib, bundle)
    session = model.session()
    session.prefill(PROMPT)
    seq = list(PROMPT)
    worst = 0.0
    for token in [11, 12, 13, 200, 1]:
        want = runnable.logits(seq)[-1]
        got = session.logits()
        worst = max(worst, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
        session.step(token)
        seq.append(token)
    assert worst <= PROMPT_TOLERANCE, worst
    assert session.length() == len(seq)
    session.close()
    model.close()


CASES = [
    dict(temperature=0.0),
    dict(temperature=0.8, seed=3),
    dict(temperature=1.3, top_k=20, seed=11),
    dict(temperature=0.9, top_p=0.8, seed=5),
    dict(temperature=1.0, top_k=40, top_p=0.95, repetition_penalty=1.3, seed=2**40 + 1),
    dict(temperature=0.0, repetition_penalty=1.5),
    dict(temperature=0.8, presence_penalty=1.5, frequency_penalty=0.5, seed=9),
    dict(temperature=0.0, frequency_penalty=2.0, logit_bias={7: 3.0, 250: -100.0}),
    dict(temperature=1.1, top_p=0.9, logit_bias={3: 2.5}, presence_penalty=-0.5, seed=4),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_tokens_equal_riftco_nn_generate_over_64_steps(lib, bundle, case):
    runnable = load_bundle(bundle)
    config = SamplingConfig(max_new_tokens=64, **case)
    want = nn_generate(runnable.model, [PROMPT], config)[0].tokens
    model = Model(lib, bundle)
    got = generate(model, PROMPT, 64, **case)
    model.close()
    assert len(want) == 64  # the context is 32: the window slid
    assert got == want


def test_sampler_draws_equal_sample_next(lib):
    rng = np.random.default_rng(0)
    configs = [
        dict(temperature=1.0),
        dict(temperature=0.7, top_k=5),
        dict(temperature=1.5, top_p=0.6),
        dict(temperature=1.1, top_k=50, top_p=0.9, repetition_penalty=1.7),
        dict(temperature=0.9, vocab_limit=150),
        dict(temperature=0.0, repetition_penalty=2.0),
        dict(temperature=2.0, top_p=1.0),
        dict(temperature=0.8, top_k=30, presence_penalty=1.2, frequency_penalty=-0.7),
        dict(temperature=1.0, logit_bias={0: 5.0, 1: -3.5}, frequency_penalty=0.3),
        dict(temperature=0.0, presence_penalty=2.0, logit_bias={1: 1.0}),
    ]
    for seed in range(40):
        for case in configs:
            config = SamplingConfig(seed=seed, **case)
            index = seed % 3
            generator = sequence_rng(seed, index)
            sampler = Sampler(lib, seed=seed, index=index, **case)
            seen = [int(t) for t in rng.integers(0, 200, 10)]
            sampler.observe(seen)
            counts: dict[int, int] = {}
            for _ in range(8):
                width = int(rng.integers(2, 700))
                logits = (rng.standard_normal(width) * rng.uniform(0.1, 6)).astype(np.float32)
                if rng.random() < 0.3:
                    logits[rng.integers(0, width, 4)] = logits.max()  # ties
                want = sample_next(logits, config, generator, set(seen), counts)
                assert sampler.draw(logits) == want, (seed, case, width)
                kept = int(rng.integers(0, 300))  # a generated token the sequence keeps
                sampler.accept(kept)
                seen.append(kept)
                if config.counts_tokens:
                    counts[kept] = counts.get(kept, 0) + 1
            sampler.close()


def test_batched_step_equals_single_sessions(lib, bundle):
    model = Model(lib, bundle)
    prompts = [PROMPT, [1, 2, 3], [9] * 20, [4, 4]]
    singles, batched = [model.session() for _ in prompts], [model.session() for _ in prompts]
    for a, b, p in zip(singles, batched, prompts):
        a.prefill(p)
        b.prefill(p)
    for step in range(20):  # the third sequence slides on the way
        tokens = [(step * 7 + j * 13) % 300 for j in range(len(prompts))]
        out = step_batch(batched, tokens)
        for j, (s, t) in enumerate(zip(singles, tokens)):
            s.step(t)
            np.testing.assert_array_equal(out[j], s.logits())
            np.testing.assert_array_equal(batched[j].logits(), s.logits())
    for s in singles + batched:
        s.close()
    model.close()


def test_rollback_gives_the_same_logits_again(lib, bundle):
    model = Model(lib, bundle)
    s = model.session()
    s.prefill(PROMPT)
    s.step(10)
    s.step(20)
    want = s.logits()
    s.step(30)
    s.step(40)
    s.rollback(3)
    assert s.length() == len(PROMPT) + 1
    s.step(20)
    np.testing.assert_array_equal(s.logits(), want)
    s.rollback(0)
    s.close()
    model.close()


def test_single_steps_bit_equal_riftco_nn_native_step(lib, bundle):
    """Fed one token at a time, both run the kernels' whole-step decoder (riftco-nn over
    a contiguous cache, the C ABI over pages): the logits are bit-equal."""
    import riftco.nn as nn

    model = load_bundle(bundle).model
    cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
    sid = cache.add_sequence()
    ours = Model(lib, bundle)
    session = ours.session()
    for i, token in enumerate([*PROMPT, 11, 12, 13, 200, 1, 9, 9, 9, 4, 250, 17, 16]):
        want = model.forward_incremental([[token]], cache, [sid]).numpy()[0]
        if i == 0:
            session.prefill([token])
        else:
            session.step(token)
        np.testing.assert_array_equal(session.logits(), want)
    session.close()
    ours.close()
