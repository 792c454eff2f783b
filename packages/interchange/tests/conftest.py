"""Shared fixtures: a small tokenizer and weight set, and helpers that corrupt files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from riftco.text import BpeTokenizer


@pytest.fixture(scope="session")
def tokenizer() -> BpeTokenizer:
    corpus = "the quick brown fox jumps over the lazy dog. " * 20 + "hello world, hello there."
    return BpeTokenizer.train(corpus, vocab_size=300, pretokenize="gpt2")


@pytest.fixture
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "token_embedding.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "final_norm.weight": np.ones(4, np.float32),
        "final_norm.bias": np.zeros(4, np.float32),
    }


def _split_file(path: Path) -> tuple[dict, bytes]:
    """The header (as JSON) and the data buffer of a safetensors file."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def _join_file(path: Path, header: dict | bytes, data: bytes) -> None:
    """Write a safetensors file from a header (JSON or raw bytes) and a data buffer."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.fixture
def split_file():
    return _split_file


@pytest.fixture
def join_file():
    return _join_file


def _random_arrays(topology, seed: int = 0) -> dict[str, np.ndarray]:
    from riftco.interchange.layout import expected_shapes

    rng = np.random.default_rng(seed)
    return {
        name: (rng.standard_normal(shape) * 0.2).astype(np.float32)
        for name, shape in expected_shapes(topology).items()
    }


@pytest.fixture
def random_arrays():
    """``random_arrays(topology, seed)``: every parameter of ``topology``, random."""
    return _random_arrays


MODEL_SIZES = dict(vocab_size=320, context_length=32, d_model=16, n_layers=2, n_heads=2, d_ff=48)


def _make_model(preset: str = "gpt2", seed: int = 0, **overrides):
    from riftco.nn import DecoderOnlyTransformer, TransformerConfig

    config = TransformerConfig.preset(preset, **dict(MODEL_SIZES, **overrides))
    model = DecoderOnlyTransformer(config, seed=seed)
    # Perturb the norms and biases too, so that a mix-up of any two tensors shows.
    rng = np.random.default_rng(seed + 1)
    model.load_state_dict(
        {
            name: (np.asarray(value.numpy()) + rng.standard_normal(value.shape) * 0.1).astype(
                np.float32
            )
            for name, value in model.state_dict().items()
        }
    )
    return model.eval()


@pytest.fixture
def make_model():
    """``make_model(preset, seed, **overrides)``: a small model with random weights everywhere."""
    return _make_model
