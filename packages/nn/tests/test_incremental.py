"""Incremental decoding over the contiguous cache equals the full forward, for ragged
sequences in one batch, prompts and single tokens mixed."""

from __future__ import annotations

import numpy as np
import pytest
from test_transformer import PRESETS

import riftco.nn as nn
from riftco.autograd import no_grad


def full_logits(model, seqs):
    with no_grad():
        return [model([s]).numpy()[0] for s in seqs]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_prefill_and_decode_equal_full_forward(backend, name):
    config = PRESETS[name]
    model = nn.DecoderOnlyTransformer(config, seed=11, backend=backend)
    rng = np.random.default_rng(1)
    seqs = [rng.integers(0, 37, n).tolist() for n in (11, 4, 16, 7)]
    want = full_logits(model, seqs)
    cache = nn.ContiguousKVCache(config, max_sequences=5, backend=backend)
    ids = [cache.add_sequence() for _ in seqs]
    prompt = [6, 1, 9, 7]
    got = model.forward_incremental(
        [s[:n] for s, n in zip(seqs, prompt)], cache, ids, all_logits=True
    ).numpy()
    row = 0
    for n, w in zip(prompt, want):
        np.testing.assert_allclose(got[row : row + n], w[:n], rtol=1e-4, atol=1e-5)
        row += n
    done = list(prompt)
    while True:
        active = [j for j in range(len(seqs)) if done[j] < len(seqs[j])]
        if not active:
            break
        # Sequence 2 takes two tokens at once where it can: steps mix counts.
        counts = [2 if j == 2 and done[j] + 2 <= len(seqs[j]) else 1 for j in active]
        feed = [seqs[j][done[j] : done[j] + n] for j, n in zip(active, counts)]
        last = model.forward_incremental(feed, cache, [ids[j] for j in active]).numpy()
        for r, (j, n) in enumerate(zip(active, counts)):
            done[j] += n
            np.testing.assert_allclose(last[r], want[j][done[j] - 1], rtol=1e-4, atol=1e-5)
    assert [cache.length(i) for i in ids] == [len(s) for s in seqs]


def test_cache_errors_and_slots():
    config = PRESETS["gpt2"]
    model = nn.DecoderOnlyTransformer(config)
    cache = nn.ContiguousKVCache(config, max_sequences=2, capacity=8)
    assert isinstance(cache, nn.KVCache)
    a = cache.add_sequence()
    b = cache.add_sequence()
    with pytest.raises(nn.CacheError, match="in use"):
        cache.add_sequence()
    with pytest.raises(nn.CacheError, match="cannot take"):
        model.forward_incremental([[1] * 9], cache, [a])
    with pytest.raises(nn.CacheError, match="no sequence"):
        model.forward_incremental([[1]], cache, [7])
    with pytest.raises(nn.CacheError, match="twice"):
        model.forward_incremental([[1], [2]], cache, [a, a])
    model.forward_incremental([[1, 2, 3]], cache, [b])
    assert cache.length(b) == 3 and cache.length(a) == 0
    cache.remove(b)
    c = cache.add_sequence()
    assert cache.length(c) == 0
    fresh = nn.ContiguousKVCache(config, 1)
    with pytest.raises(nn.ConfigError, match="longer than the context"):
        model.forward_incremental([[1] * 17], fresh, [fresh.add_sequence()])


def test_free_slots_and_rollback_of_a_begun_step():
    config = PRESETS["gpt2"]
    cache = nn.ContiguousKVCache(config, max_sequences=2, capacity=8)
    assert cache.free_slots == 2
    a = cache.add_sequence()
    assert cache.free_slots == 1
    step = cache.begin([a], [3])
    cache.rollback()
    with pytest.raises(nn.CacheError, match="not begun"):
        cache.commit(step)
    assert cache.length(a) == 0
    cache.remove(a)
    assert cache.free_slots == 2
