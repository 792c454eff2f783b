"""Fixtures of the C ABI tests: the library, small bundles of the GPT and Llama presets."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from riftco_ctypes import Lib, library_path


@pytest.fixture(scope="session")
def lib() -> Lib:
    path = library_path()
    if path is None:
        if os.environ.get("RIFTCO_CAPI_REQUIRED"):
            pytest.fail("libriftco.so not found (make capi builds it; or set RIFTCO_CAPI_LIB)")
        pytest.skip("libriftco.so not built (make capi)")
    return Lib(path)


@pytest.fixture(scope="session")
def tokenizer():
    from riftco.text import BpeTokenizer

    corpus = "the quick brown fox jumps over the lazy dog. " * 20 + "hello world, hello there."
    return BpeTokenizer.train(corpus, vocab_size=300, pretokenize="gpt2")


CONFIGS = {
    "gpt2": dict(
        preset="gpt2",
        vocab_size=300,
        context_length=32,
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_ff=128,
    ),
    "llama": dict(
        preset="llama",
        vocab_size=300,
        context_length=32,
        d_model=64,
        n_layers=2,
        n_heads=4,
        kv_heads=2,
        d_ff=128,
    ),
}


def make_bundle(path: Path, name: str, tokenizer, seed: int = 0) -> Path:
    from riftco.interchange import write_bundle
    from riftco.interchange.layout import expected_shapes
    from riftco.nn import TransformerConfig

    config = TransformerConfig.from_dict(CONFIGS[name])
    rng = np.random.default_rng(seed)
    arrays = {
        n: (rng.standard_normal(shape) * 0.3).astype(np.float32)
        for n, shape in expected_shapes(config).items()
    }
    write_bundle(path, config.to_dict(), arrays, tokenizer.to_state())
    return path


@pytest.fixture(scope="session", params=sorted(CONFIGS))
def bundle(request, tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp(request.param)
    return make_bundle(folder / f"{request.param}.rift", request.param, tokenizer)
