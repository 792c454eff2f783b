"""Configuration validation, presets and the closed-form parameter count."""

from __future__ import annotations

import pytest

import riftco.nn as nn


def closed_form(c: nn.TransformerConfig) -> int:
    """Parameters of a decoder, counted from the equations."""
    d, ff, v, h, hkv, dh = c.d_model, c.d_ff, c.vocab_size, c.n_heads, c.n_kv_heads, c.head_dim
    bias = c.linear_bias
    norm = 2 * d if c.norm == "layer" else d
    attention = d * h * dh + 2 * d * hkv * dh + h * dh * d
    attention += (h * dh + 2 * hkv * dh + d) if bias else 0
    if c.feed_forward == "swiglu":
        feed_forward = 3 * d * ff + ((2 * ff + d) if bias else 0)
    else:
        feed_forward = 2 * d * ff + ((ff + d) if bias else 0)
    total = v * d + (c.context_length * d if c.positions == "learned" else 0)
    total += c.n_layers * (2 * norm + attention + feed_forward) + norm
    total += (0 if c.tie_embeddings else v * d) + (v if c.head_bias else 0)
    return total


@pytest.mark.parametrize("preset", ["gpt2", "riftco_v1", "llama"])
@pytest.mark.parametrize("size", ["tiny", "small"])
def test_parameter_count_matches_closed_form(preset, size):
    config = nn.TransformerConfig.preset(preset, size=size)
    assert nn.DecoderOnlyTransformer(config).num_parameters() == closed_form(config)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(kv_heads=2, sliding_window=32),
        dict(tie_embeddings=True, head_bias=True),
        dict(linear_bias=True, kv_heads=1),
    ],
)
def test_parameter_count_of_variants(overrides):
    config = nn.TransformerConfig.preset("llama", size="tiny", **overrides)
    assert nn.DecoderOnlyTransformer(config).num_parameters() == closed_form(config)


def test_small_gpt_has_about_eleven_million_parameters():
    count = nn.DecoderOnlyTransformer(
        nn.TransformerConfig.preset("gpt2", size="small")
    ).num_parameters()
    assert 11.0e6 < count < 11.2e6


def test_presets():
    assert nn.TransformerConfig() == nn.TransformerConfig.preset("gpt2", size="tiny")
    v1 = nn.TransformerConfig.preset("riftco_v1")
    assert v1.head_bias and v1.gelu == "exact" and not v1.tie_embeddings
    llama = nn.TransformerConfig.preset("llama", sliding_window=4096)
    assert (llama.norm, llama.positions, llama.feed_forward, llama.linear_bias) == (
        "rms",
        "rotary",
        "swiglu",
        False,
    )
    assert llama.family == "llama" and v1.family == "gpt"
    data = llama.to_dict()
    assert nn.TransformerConfig.from_dict(data) == llama
    assert nn.TransformerConfig.from_dict({"preset": "llama", "sliding_window": 4096}) == llama


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(d_model=130, n_heads=4), "not divisible by n_heads"),
        (dict(n_heads=4, kv_heads=3), "divisor of n_heads"),
        (dict(norm="batch"), "norm must be one of"),
        (dict(gelu="fast"), "gelu must be one of"),
        (dict(vocab_size=0), "vocab_size must be a positive int"),
        (dict(positions="rotary", d_model=12, n_heads=4), "even head dimension"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(dropout=1.0), "dropout"),
        (dict(norm_eps=-1.0), "norm_eps"),
        (dict(attention="naive"), "attention must be one of"),
    ],
)
def test_validation(fields, message):
    with pytest.raises(nn.ConfigError, match=message):
        nn.TransformerConfig(**fields)


def test_unknown_names():
    with pytest.raises(nn.ConfigError, match="unknown preset"):
        nn.TransformerConfig.preset("gpt5")
    with pytest.raises(nn.ConfigError, match="unknown size"):
        nn.TransformerConfig.preset("gpt2", size="huge")
    with pytest.raises(nn.ConfigError, match="unknown fields"):
        nn.TransformerConfig.from_dict({"layers": 3})
    with pytest.raises(nn.ConfigError, match="longer than the context length 64"):
        nn.TransformerConfig().check_length(65)
    assert isinstance(nn.ConfigError("x"), ValueError)
