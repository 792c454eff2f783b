"""PagedKVCachePool: parity with the contiguous cache and the full forward,
exhaustion and reuse, transactional steps, and shared prompt pages."""

import numpy as np
import pytest

import riftco.nn as nn
from riftco.serve import CacheError, PoolExhausted
from riftco.serve.caches import ContiguousKVCachePool, PagedKVCachePool

CONFIGS = {
    "gpt2": nn.TransformerConfig.preset("gpt2", size="tiny", vocab_size=97, context_length=48),
    "llama-gqa-window": nn.TransformerConfig.preset(
        "llama", size="tiny", vocab_size=97, context_length=48, kv_heads=2, sliding_window=9
    ),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request):
    return nn.DecoderOnlyTransformer(CONFIGS[request.param], seed=3)


def prompts(seed=0, lengths=(11, 1, 23)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 97, size=n).tolist() for n in lengths]


def full_logits(model, tokens):
    return model.forward([tokens]).numpy()[0]


def decode(model, cache, seqs, steps=6):
    """Prefill every prompt in one forward, then greedy steps; logits of every step."""
    ids = [cache.add_sequence(reserve_tokens=len(p) + steps) for p in seqs]
    history = [list(p) for p in seqs]
    feed = [list(p) for p in seqs]
    out = []
    for _ in range(steps):
        logits = model.forward_incremental(feed, cache, ids).numpy()
        out.append(logits)
        feed = [[int(np.argmax(row))] for row in logits]
        for h, f in zip(history, feed):
            h += f
    return out, history, ids


@pytest.mark.parametrize("page_size", [4, 16])
def test_paged_equals_contiguous_equals_full_forward(model, page_size):
    seqs = prompts()
    paged = PagedKVCachePool(model.config, pages=64, page_size=page_size)
    contiguous = ContiguousKVCachePool(model.config, max_sequences=3)
    got, history, _ = decode(model, paged, seqs)
    want, want_history, _ = decode(model, contiguous, seqs)
    assert history == want_history
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    for j, h in enumerate(history):
        # The last decode step saw every token but the last: compare with a full forward.
        full = full_logits(model, h[:-1])
        np.testing.assert_allclose(got[-1][j], full[-1], rtol=1e-4, atol=1e-4)
    # Prefill logits of every prompt position, in one packed forward.
    cache = PagedKVCachePool(model.config, pages=64, page_size=page_size)
    sid = cache.add_sequence()
    every = model.forward_incremental([seqs[2]], cache, [sid], all_logits=True).numpy()
    np.testing.assert_allclose(every, full_logits(model, seqs[2]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("page_size", [4, 16])
def test_whole_step_decoding_over_pages_equals_the_op_by_op_steps(model, page_size):
    from riftco.nn.native_decode import decoder_for

    assert decoder_for(model) is not None  # single tokens go through it
    seqs = prompts(1)
    runs = []
    for whole_step in (True, False):
        cache = PagedKVCachePool(model.config, pages=64, page_size=page_size)
        ids = [cache.add_sequence() for _ in seqs]
        logits = [model.forward_incremental(seqs, cache, ids).numpy()]
        for t in range(page_size + 3):  # across a page boundary
            feed = [[(5 * t + j) % 97] for j in range(len(seqs))]
            step = model.forward_incremental(feed, cache, ids, whole_step=whole_step)
            logits.append(step.numpy())
        runs.append(np.stack(logits))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5, atol=1e-5)


def test_pages_are_leased_as_sequences_grow_and_reused(model):
    cache = PagedKVCachePool(model.config, pages=6, page_size=4, share_prefixes=False)
    a = cache.add_sequence()
    model.forward_incremental([[1, 2, 3, 4, 5]], cache, [a])
    assert cache.length(a) == 5 and len(cache.page_table(a)) == 2
    assert cache.pages_in_use == 2
    b = cache.add_sequence()
    model.forward_incremental([list(range(16))], cache, [b])
    assert cache.pages_in_use == 6 and cache.pages_available == 0
    c = cache.add_sequence()
    with pytest.raises(PoolExhausted, match="exhausted"):
        model.forward_incremental([[7]], cache, [c])
    assert cache.length(c) == 0 and cache.pages_in_use == 6  # nothing changed
    with pytest.raises(PoolExhausted):
        model.forward_incremental([[9], [9]], cache, [a, b])  # b needs a fifth page
    assert (cache.length(a), cache.length(b)) == (5, 16) and cache.pages_in_use == 6
    before = cache.page_table(a)
    cache.remove(b)
    assert cache.pages_in_use == 2
    model.forward_incremental([[7, 8, 9, 10]], cache, [c])
    assert set(cache.page_table(c)) <= set(range(6)) - set(before)
    logits = model.forward_incremental([[6]], cache, [a]).numpy()
    np.testing.assert_allclose(
        logits[0], full_logits(model, [1, 2, 3, 4, 5, 6])[-1], rtol=1e-4, atol=1e-4
    )


def test_reservations_hold_room(model):
    cache = PagedKVCachePool(model.config, pages=4, page_size=4)
    a = cache.add_sequence(reserve_tokens=12)  # three pages
    assert cache.pages_available == 1 and cache.pages_in_use == 0
    with pytest.raises(PoolExhausted):
        cache.add_sequence(reserve_tokens=8)
    b = cache.add_sequence(reserve_tokens=4)
    with pytest.raises(PoolExhausted):  # b grows past its reservation into a's room
        model.forward_incremental([list(range(5))], cache, [b])
    model.forward_incremental([list(range(12))], cache, [a])  # a's pages are there
    cache.remove(a)
    cache.remove(b)
    assert cache.pages_available == 4
    with pytest.raises(CacheError, match="context"):
        cache.add_sequence(reserve_tokens=model.config.context_length + 1)


def test_a_failed_step_leaves_the_cache_as_it_was(model, monkeypatch):
    cache = PagedKVCachePool(model.config, pages=16, page_size=4)
    a, b = cache.add_sequence(), cache.add_sequence()
    model.forward_incremental([[1, 2, 3], [4, 5, 6, 7]], cache, [a, b])
    tables = (cache.page_table(a), cache.page_table(b))
    keys = [k.numpy().copy() for k in cache.keys]
    calls = {"n": 0}
    attend = PagedKVCachePool.attend

    def failing(self, step, layer, queries, **kw):
        calls["n"] += 1
        if layer == model.config.n_layers - 1:
            raise RuntimeError("kernel failure")
        return attend(self, step, layer, queries, **kw)

    monkeypatch.setattr(PagedKVCachePool, "attend", failing)
    with pytest.raises(RuntimeError, match="kernel failure"):
        model.forward_incremental([[8, 9], [10]], cache, [a, b])
    monkeypatch.undo()
    assert calls["n"] == model.config.n_layers
    assert (cache.length(a), cache.length(b)) == (3, 4)
    cache.rollback()  # what the scheduler does when a step fails
    assert (cache.page_table(a), cache.page_table(b)) == tables
    assert cache.pages_in_use == 2
    for k, before in zip(cache.keys, keys):  # committed rows are untouched
        rows = [p * 4 + i for p in tables[0] for i in range(4)][:3]
        np.testing.assert_array_equal(k.numpy()[rows], before[rows])
    # The next step works and sees exactly the committed tokens.
    logits = model.forward_incremental([[8], [10]], cache, [a, b]).numpy()
    np.testing.assert_allclose(logits[0], full_logits(model, [1, 2, 3, 8])[-1], atol=1e-4)
    np.testing.assert_allclose(logits[1], full_logits(model, [4, 5, 6, 7, 10])[-1], atol=1e-4)


def test_identical_prompt_pages_are_shared(model):
    cache = PagedKVCachePool(model.config, pages=12, page_size=4)
    prompt = list(range(30, 40))  # two full pages and a partial one
    a = cache.add_sequence(prompt=prompt, reserve_tokens=14)
    model.forward_incremental([prompt], cache, [a])
    b = cache.add_sequence(prompt=prompt + [5, 6], reserve_tokens=14)
    assert cache.length(b) == 8  # two pages reused, the rest to compute
    assert cache.page_table(b) == cache.page_table(a)[:2]
    logits = model.forward_incremental([(prompt + [5, 6])[8:]], cache, [b]).numpy()
    np.testing.assert_allclose(
        logits[0], full_logits(model, prompt + [5, 6])[-1], rtol=1e-4, atol=1e-4
    )
    assert cache.pages_in_use == 3 + 1  # a's three pages and b's own third page
    # b's decode writes its own pages; the shared pages are never written again.
    shared_rows = [p * 4 + i for p in cache.page_table(a)[:2] for i in range(4)]
    before = [k.numpy()[shared_rows].copy() for k in cache.keys]
    model.forward_incremental([[1]], cache, [b])
    for k, old in zip(cache.keys, before):
        np.testing.assert_array_equal(k.numpy()[shared_rows], old)
    cache.remove(a)
    cache.remove(b)
    # Full prompt pages stay indexed: a's first two and b's third.
    assert cache.pages_in_use == 0 and cache.allocator.cached == 3
    c = cache.add_sequence(prompt=prompt, reserve_tokens=10)  # from the cached pages
    assert cache.length(c) == 8
    # A prompt whose pages are all shared still computes its last token.
    d = cache.add_sequence(prompt=prompt[:8], reserve_tokens=8)
    assert cache.length(d) == 4


def test_unknown_sequences_and_bad_steps(model):
    cache = PagedKVCachePool(model.config, pages=4, page_size=4)
    with pytest.raises(CacheError, match="no sequence"):
        cache.length(3)
    a = cache.add_sequence()
    with pytest.raises(CacheError, match="already exists"):
        cache.add_sequence(a)
    with pytest.raises(CacheError):
        cache.begin([a, a], [1, 1])
    step = cache.begin([a], [2])
    cache.rollback()
    with pytest.raises(CacheError, match="not begun"):
        cache.commit(step)


def test_every_cache_raises_the_one_cache_error():
    from riftco.serve import ServeError

    assert CacheError is nn.CacheError
    assert issubclass(PoolExhausted, CacheError) and issubclass(PoolExhausted, ServeError)
    config = CONFIGS["gpt2"]
    caches = [
        nn.ContiguousKVCache(config, max_sequences=1),
        ContiguousKVCachePool(config, max_sequences=1),
        PagedKVCachePool(config, pages=4, page_size=4),
    ]
    for cache in caches:
        with pytest.raises(nn.CacheError, match="no sequence"):
            cache.length(12345)
