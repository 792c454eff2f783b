"""The paged cache on every available backend (the tests-only numpy reference
backend included): the same logits as the contiguous cache."""

import numpy as np

import riftco.nn as nn
from riftco.serve import ContiguousKVCachePool, PagedKVCachePool
from riftco.testing.tensor import backend  # noqa: F401  (the fixture)


def test_paged_matches_contiguous_on_every_backend(backend):  # noqa: F811
    config = nn.TransformerConfig.preset(
        "llama", size="tiny", vocab_size=61, context_length=32, kv_heads=2, n_layers=1
    )
    model = nn.DecoderOnlyTransformer(config, seed=4, backend=backend)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8]]
    results = []
    for cache in (
        PagedKVCachePool(config, pages=8, page_size=4, backend=backend),
        ContiguousKVCachePool(config, max_sequences=2, backend=backend),
    ):
        ids = [cache.add_sequence() for _ in prompts]
        steps = [model.forward_incremental(prompts, cache, ids).numpy()]
        steps.append(model.forward_incremental([[10], [11]], cache, ids).numpy())
        results.append(steps)
    for paged, contiguous in zip(*results):
        np.testing.assert_allclose(paged, contiguous, rtol=1e-4, atol=1e-5)
