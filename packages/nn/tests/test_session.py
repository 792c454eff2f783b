"""DecodeSession and DecodeSessionPool: life cycle, rollback, batched steps, sliding,
page accounting and typed errors; generate() over sessions equals the contiguous
reference decode."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
from riftco.autograd import no_grad

CONFIGS = {
    "gpt2": nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=97, context_length=40),
    "llama": nn.TransformerConfig.preset(
        "llama", size="tiny", vocab_size=97, context_length=40, kv_heads=2
    ),
    "llama-window": nn.TransformerConfig.preset(
        "llama", size="tiny", vocab_size=97, context_length=40, kv_heads=2, sliding_window=7
    ),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request):
    return nn.DecoderOnlyTransformer(CONFIGS[request.param], seed=5)


def prompts(seed=0, lengths=(9, 1, 14)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 97, size=n).tolist() for n in lengths]


def full_last(model, tokens):
    with no_grad():
        return model.forward([tokens]).numpy()[0, -1]


# -- a reference: generate() as it was, over the contiguous cache --------------------
def reference_generate(model, prompts, config):
    c = model.config
    samplers = [nn.TokenSampler(config, j) for j in range(len(prompts))]
    for s, p in zip(samplers, prompts):
        s.observe(p)
    out = [[] for _ in prompts]
    reasons = [None] * len(prompts)
    cache = nn.ContiguousKVCache(c, max_sequences=len(prompts))
    ids = [cache.add_sequence() for _ in prompts]
    active, feed = list(range(len(prompts))), [list(p) for p in prompts]
    replay = nn.replay_tokens(cache.capacity)
    stops = set(config.stop_ids)
    while active:
        logits = model.forward_incremental(feed, cache, [ids[j] for j in active]).numpy()
        still, feed = [], []
        for row, j in enumerate(active):
            token = samplers[j](logits[row])
            if token in stops:
                reasons[j] = "stop"
                continue
            out[j].append(token)
            samplers[j].accept(token)
            if len(out[j]) >= config.max_new_tokens:
                reasons[j] = "length"
                continue
            still.append(j)
            if cache.length(ids[j]) >= cache.capacity:
                cache.remove(ids[j])
                ids[j] = cache.add_sequence()
                feed.append([*prompts[j], *out[j]][-replay:])
            else:
                feed.append([token])
        active = still
    return [(tokens, reason) for tokens, reason in zip(out, reasons)]


SAMPLINGS = {
    "greedy": nn.SamplingConfig(max_new_tokens=12),
    "seeded": nn.SamplingConfig(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=4),
    "penalties": nn.SamplingConfig(
        max_new_tokens=12, temperature=0.7, top_k=20, seed=9, repetition_penalty=1.3
    ),
    "sliding": nn.SamplingConfig(max_new_tokens=70, temperature=1.0, seed=1),
    "stops": nn.SamplingConfig(max_new_tokens=30, temperature=1.2, seed=2, stop_ids=(3, 5, 8)),
}


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
def test_generate_over_sessions_equals_the_contiguous_reference(model, sampling):
    config = SAMPLINGS[sampling]
    ps = prompts(1)
    got = [(r.tokens, r.finish_reason) for r in nn.generate(model, ps, config)]
    assert got == reference_generate(model, ps, config)
    if sampling == "sliding":
        assert all(len(t) == 70 for t, _ in got)  # past the context of 40


def test_generate_without_paged_attention_uses_the_contiguous_cache(model, monkeypatch):
    backend = type(model.backend)
    every = backend.capabilities(model.backend)
    monkeypatch.setattr(backend, "capabilities", lambda self: every - {"paged_attention"})
    made = []
    original = nn.ContiguousKVCache.__init__

    def spy(self, *args, **kwargs):
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(nn.ContiguousKVCache, "__init__", spy)
    config = SAMPLINGS["sliding"]
    got = [(r.tokens, r.finish_reason) for r in nn.generate(model, prompts(2), config)]
    assert len(made) == 1
    monkeypatch.undo()
    assert got == reference_generate(model, prompts(2), config)


# -- the life cycle ---------------------------------------------------------------------
def test_prefill_step_sample_rollback_close(model):
    pool = nn.DecodeSessionPool(model, pages=32, page_size=4)
    session = pool.session()
    prompt = prompts()[0]
    logits = session.prefill(prompt)
    np.testing.assert_allclose(logits, full_last(model, prompt), rtol=1e-4, atol=1e-4)
    assert len(session) == session.cached_tokens == len(prompt)
    greedy = nn.SamplingConfig()
    token = session.sample(greedy)
    assert token == int(np.argmax(logits))
    logits = session.step(token)
    np.testing.assert_allclose(logits, full_last(model, [*prompt, token]), rtol=1e-4, atol=1e-4)
    assert session.tokens == [*prompt, token]
    session.rollback(3)
    assert session.tokens == prompt[:-2] and session.logits is None
    with pytest.raises(nn.SessionError, match="no logits"):
        session.sample(greedy)
    logits = session.step(prompt[-2])
    np.testing.assert_allclose(logits, full_last(model, prompt[:-1]), rtol=1e-4, atol=1e-4)
    assert pool.pages_in_use == pool.cache.pages_for(len(prompt) - 1)
    session.close()
    assert session.closed and pool.pages_in_use == 0 and pool.sessions == []
    session.close()  # harmless


def run(session, prompt, steps):
    out = [session.prefill(prompt).copy()]
    for t in steps:
        out.append(session.step(t).copy())
    return out


@pytest.mark.parametrize("drop", [1, 2, 5, 6])
def test_rollback_then_steps_equal_a_fresh_session(model, drop):
    prompt, kept, dropped, again = prompts()[2], [4, 8, 15], [16, 23, 42, 7, 1, 2], [9, 9, 3]
    pool = nn.DecodeSessionPool(model, pages=32, page_size=4)
    session = pool.session()
    run(session, prompt, [*kept, *dropped[:drop]])
    session.rollback(drop)
    assert session.tokens == [*prompt, *kept]
    got = [session.step(t).copy() for t in again]
    fresh = run(nn.DecodeSessionPool(model, pages=32, page_size=4).session(), prompt, kept + again)
    for a, b in zip(got, fresh[-len(again) :]):
        np.testing.assert_array_equal(a, b)  # the same pages, the same sums
    assert pool.pages_in_use == pool.cache.pages_for(len(session))


def test_rollback_of_the_whole_window_refills_it(model):
    pool = nn.DecodeSessionPool(model, pages=32, page_size=4)
    session = pool.session()
    prompt = prompts()[0]
    session.prefill(prompt)
    session.rollback(len(prompt))
    assert len(session) == 0 and pool.pages_in_use == 0
    logits = session.prefill(prompt[:3])
    np.testing.assert_allclose(logits, full_last(model, prompt[:3]), rtol=1e-4, atol=1e-4)


def test_rollback_into_a_shared_page_copies_it(model):
    pool = nn.DecodeSessionPool(model, pages=32, page_size=4, share_prefixes=True)
    prompt = list(range(10, 20))  # two full pages and a partial one
    a, b = pool.session(), pool.session()
    a.prefill(prompt)
    b.prefill([*prompt, 1])
    shared = pool.cache.page_table(a._seq)[:2]
    assert pool.cache.page_table(b._seq)[:2] == shared  # b computed only its own tokens
    before = [k.numpy().copy() for k in pool.cache.keys]
    b.rollback(len(prompt) + 1 - 6)  # into the second, shared page
    assert pool.cache.page_table(b._seq)[:1] == shared[:1]
    assert pool.cache.page_table(b._seq)[1] not in shared
    logits = [b.step(t).copy() for t in (50, 51, 52)]
    rows = [p * 4 + i for p in shared for i in range(4)]
    for k, old in zip(pool.cache.keys, before):
        np.testing.assert_array_equal(k.numpy()[rows], old[rows])  # a's pages untouched
    np.testing.assert_allclose(
        logits[-1], full_last(model, [*prompt[:6], 50, 51, 52]), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(a.step(1), full_last(model, [*prompt, 1]), rtol=1e-4, atol=1e-4)
    pool.close()
    assert pool.pages_in_use == 0 and pool.cache.allocator.cached >= 1


# -- batches ----------------------------------------------------------------------------
@pytest.mark.parametrize("lease", [True, False])
def test_a_batched_step_equals_separate_steps(model, lease):
    ps = prompts(3)
    steps = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16], [1, 2, 3, 4, 5, 6]]
    pool = nn.DecodeSessionPool(model, pages=48, page_size=4)
    sessions = [pool.session(reserve_tokens=len(p) + 6, lease=lease) for p in ps]
    batched = [pool.prefill(sessions, ps).copy()]
    for t in range(6):
        batched.append(pool.step(sessions, [s[t] for s in steps]).copy())
    for j, p in enumerate(ps):
        alone = run(nn.DecodeSessionPool(model, pages=16, page_size=4).session(), p, steps[j])
        for b, a in zip(batched, alone):
            if lease:  # consecutive pages: the kernels sum in the same tiles
                np.testing.assert_array_equal(b[j], a)
            else:
                np.testing.assert_allclose(b[j], a, rtol=1e-5, atol=1e-5)
    pool.close()
    assert pool.pages_in_use == 0


def test_sessions_over_a_contiguous_cache_step_together(model):
    cache = nn.ContiguousKVCache(model.config, max_sequences=2)
    a, b = nn.DecodeSession(model, cache), nn.DecodeSession(model, cache)
    rows = nn.prefill_many([a, b], [[1, 2, 3], [4]])
    np.testing.assert_allclose(rows[1], full_last(model, [4]), rtol=1e-4, atol=1e-4)
    rows = nn.step_many([a, b], [7, 8])
    np.testing.assert_allclose(rows[0], full_last(model, [1, 2, 3, 7]), rtol=1e-4, atol=1e-4)
    a.rollback(2)
    np.testing.assert_allclose(a.step(9), full_last(model, [1, 2, 9]), rtol=1e-4, atol=1e-4)
    a.close()
    b.close()
    assert cache.free_slots == 2


def test_sliding_equals_generates_sliding(model):
    config = nn.SamplingConfig(max_new_tokens=90, temperature=0.8, seed=6)
    prompt = prompts()[2]
    want = nn.generate(model, [prompt], config)[0].tokens
    pool = nn.DecodeSessionPool(model, pages=20, page_size=4)
    session = pool.session()
    session.prefill(prompt)
    got = []
    while len(got) < 90:
        token = session.sample(config)
        got.append(token)
        if len(got) < 90:
            session.step(token)
        assert session.cached_tokens <= model.config.context_length
    assert got == want
    assert len(session) == len(prompt) + 89 and session.cached_tokens < len(session)


# -- pages ------------------------------------------------------------------------------
def test_page_accounting(model):
    pool = nn.DecodeSessionPool(model, pages=12, page_size=4)
    a = pool.session(reserve_tokens=10)
    assert pool.pages_in_use == 0  # the place is taken at the first feed
    a.prefill([1, 2, 3, 4, 5])
    assert pool.pages_in_use == 2 and pool.cache.pages_available == 12 - 3
    b = pool.session(reserve_tokens=10, lease=True)
    b.prefill([1])
    assert pool.pages_in_use == 5  # b's three pages at once
    assert pool.cache.page_table(b._seq) == [2, 3, 4]  # consecutive
    for t in range(4):
        a.step(t)
    assert pool.pages_in_use == 6
    a.rollback(5)  # 4 tokens left: the second and third page go back
    assert pool.pages_in_use == 4
    a.close()
    assert pool.pages_in_use == 3
    pool.close()
    assert pool.pages_in_use == 0 and pool.cache.pages_available == 12
    assert b.closed and pool.sessions == []


def test_identical_prompts_share_pages(model):
    pool = nn.DecodeSessionPool(model, pages=12, page_size=4, share_prefixes=True)
    prompt = list(range(20, 29))  # two full pages
    a, b = pool.session(), pool.session()
    la = a.prefill(prompt)
    lb = b.prefill(prompt)
    np.testing.assert_allclose(la, lb, rtol=1e-5, atol=1e-5)
    assert pool.pages_in_use == 3 + 1  # b holds a's two full pages and its own third
    a.close()
    b.close()
    assert pool.pages_in_use == 0


# -- errors -----------------------------------------------------------------------------
def test_typed_errors(model):
    pool = nn.DecodeSessionPool(model, pages=16, page_size=4)
    other = nn.DecodeSessionPool(model, pages=16, page_size=4)
    session = pool.session()
    vocab = model.config.vocab_size
    with pytest.raises(nn.SessionError, match=f"token {vocab} is outside the vocabulary"):
        session.prefill([1, vocab])
    with pytest.raises(nn.SessionError, match="token -1"):
        session.step(-1)
    with pytest.raises(nn.SessionError, match="non-empty list of token ids"):
        session.prefill([])
    with pytest.raises(nn.SessionError, match="non-empty list of token ids"):
        session.prefill([1.5])
    assert len(session) == 0 and pool.pages_in_use == 0  # nothing was fed
    with pytest.raises(nn.SessionError, match="no logits"):
        session.sample(nn.SamplingConfig())
    session.prefill([1, 2])
    with pytest.raises(nn.SessionError, match="holds 2 tokens; cannot drop 3"):
        session.rollback(3)
    with pytest.raises(nn.SessionError, match="non-negative int"):
        session.rollback(-1)
    with pytest.raises(nn.SessionError, match="do not fit the context"):
        session.prefill(list(range(model.config.context_length + 1)))
    stranger = other.session()
    with pytest.raises(nn.SessionError, match="another"):
        pool.step([session, stranger], [1, 1])
    with pytest.raises(nn.SessionError, match="another cache"):
        nn.step_many([session, stranger], [1, 1])
    with pytest.raises(nn.SessionError, match="twice"):
        nn.step_many([session, session], [1, 1])
    with pytest.raises(nn.SessionError, match="2 sessions with 1"):
        nn.step_many([session, pool.session()], [1])
    with pytest.raises(nn.SessionError, match="reserve_tokens"):
        pool.session(reserve_tokens=model.config.context_length + 1)
    with pytest.raises(nn.SessionError, match="PagedKVCache or a ContiguousKVCache"):
        nn.DecodeSession(model, object())
    session.close()
    for call in (lambda: session.step(1), lambda: session.prefill([1])):
        with pytest.raises(nn.SessionError, match="closed"):
            call()
    with pytest.raises(nn.SessionError, match="closed"):
        session.rollback(1)
    assert issubclass(nn.SessionError, ValueError)


def test_a_failed_forward_leaves_the_session_as_it_was(model, monkeypatch):
    pool = nn.DecodeSessionPool(model, pages=16, page_size=4)
    session = pool.session()
    session.prefill([1, 2, 3])
    calls = {"n": 0}
    forward = type(model).forward_incremental

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        raise RuntimeError("kernel failure")

    monkeypatch.setattr(type(model), "forward_incremental", failing)
    with pytest.raises(RuntimeError, match="kernel failure"):
        session.step(4)
    monkeypatch.setattr(type(model), "forward_incremental", forward)
    assert session.tokens == [1, 2, 3] and session.cached_tokens == 3
    np.testing.assert_allclose(session.step(4), full_last(model, [1, 2, 3, 4]), atol=1e-4)


def test_rollback_forgets_the_dropped_tokens_in_the_penalties(model):
    config = nn.SamplingConfig(temperature=0.0, frequency_penalty=1.0, repetition_penalty=1.5)
    pool = nn.DecodeSessionPool(model, pages=16, page_size=4)
    session = pool.session()
    session.prefill([1, 2])
    session.sample(config)
    session.step(7)
    session.step(7)
    assert session.sampler.counts == {7: 2} and 7 in session.sampler.seen
    session.rollback(1)
    assert session.sampler.counts == {7: 1}
    session.rollback(1)
    assert session.sampler.counts == {} and session.sampler.seen == {1, 2}


@pytest.mark.parametrize("preset", ["gpt2", "llama-window"])
def test_op_by_op_decoding_over_pages_agrees_with_the_contiguous_cache(preset):
    # LoRA-adapted layers keep the model op by op: paged_attention and attention_varlen
    # sum in different orders there, so the logits agree closely and the tokens exactly.
    model = nn.DecoderOnlyTransformer(CONFIGS[preset], seed=5)
    nn.attach_lora(model, nn.LoraConfig(rank=2))
    from riftco.nn.native_decode import decoder_for

    assert decoder_for(model) is None
    for name in ("greedy", "seeded", "sliding"):
        config = SAMPLINGS[name]
        got = [(r.tokens, r.finish_reason) for r in nn.generate(model, prompts(4), config)]
        assert got == reference_generate(model, prompts(4), config)
    prompt, steps = prompts(4)[2], [3, 1, 4, 1, 5, 9, 2, 6]
    paged = run(nn.DecodeSessionPool(model, pages=16, page_size=4).session(), prompt, steps)
    cache = nn.ContiguousKVCache(model.config, max_sequences=1)
    contiguous = run(nn.DecodeSession(model, cache), prompt, steps)
    for a, b in zip(paged, contiguous):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
