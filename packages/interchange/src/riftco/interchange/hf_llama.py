"""Llama: riftco names and config to ``LlamaForCausalLM``'s, and back.

Both sides store linears as ``[out, in]`` and apply rotary embeddings in the
split-half (``rotate_half``) form, so weights map one to one, unpermuted.
``rotary_emb.inv_freq``, a buffer some old files hold, is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.interchange.errors import ConversionError
from riftco.interchange.hf_common import (
    Taker,
    boolean,
    float32,
    number,
    positive_int,
    refuse_unsupported,
)
from riftco.nn import TransformerConfig

ARCHITECTURE = "LlamaForCausalLM"
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_REFUSED = {"attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "rope_scaling": None}
_LINEARS = (
    ("attention.query", "self_attn.q_proj"),
    ("attention.key", "self_attn.k_proj"),
    ("attention.value", "self_attn.v_proj"),
    ("attention.output", "self_attn.o_proj"),
    ("feed_forward.gate", "mlp.gate_proj"),
    ("feed_forward.up", "mlp.up_proj"),
    ("feed_forward.down", "mlp.down_proj"),
)
_NORMS = (("attention_norm", "input_layernorm"), ("feed_forward_norm", "post_attention_layernorm"))


def llama_config(t: TransformerConfig, bos_id: int | None, eos_id: int | None) -> dict[str, Any]:
    """``config.json`` for ``t``; refuses what Llama cannot represent."""
    found = (t.norm, t.positions, t.feed_forward)
    if found != ("rms", "rotary", "swiglu"):
        raise ConversionError(
            "Llama export needs RMSNorm, rotary positions and a SwiGLU feed-forward; found "
            f"norm={t.norm!r}, positions={t.positions!r}, feed_forward={t.feed_forward!r}"
        )
    if t.sliding_window is not None:
        raise ConversionError(
            f"Llama has no sliding-window attention; found sliding_window={t.sliding_window}"
        )
    if t.linear_bias or t.head_bias:
        raise ConversionError("Llama export needs bias-free projections and head")
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "vocab_size": t.vocab_size,
        "hidden_size": t.d_model,
        "intermediate_size": t.d_ff,
        "num_hidden_layers": t.n_layers,
        "num_attention_heads": t.n_heads,
        "num_key_value_heads": t.n_kv_heads,
        "head_dim": t.head_dim,
        "max_position_embeddings": t.context_length,
        "hidden_act": "silu",
        "rms_norm_eps": t.norm_eps,
        "rope_theta": t.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": t.rope_theta},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "tie_word_embeddings": t.tie_embeddings,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "dtype": "float32",
    }


def config_from_llama(config: Mapping[str, Any]) -> TransformerConfig:
    """Our configuration for a ``LlamaForCausalLM`` config; refuses keys whose math we lack."""
    refuse_unsupported(config, _REFUSED)
    theta = config.get("rope_theta", 10000.0)
    parameters = config.get("rope_parameters")
    if parameters is not None:
        if (
            not isinstance(parameters, Mapping)
            or parameters.get("rope_type", "default") != "default"
        ):
            raise ConversionError(
                f"config.json: rope_parameters={parameters!r} is not supported "
                "(riftco implements rope_type 'default')"
            )
        theta = parameters.get("rope_theta", theta)
    d_model, heads = (
        positive_int(config, "hidden_size"),
        positive_int(config, "num_attention_heads"),
    )
    head_dim = positive_int(config, "head_dim") if config.get("head_dim") else d_model // heads
    if head_dim * heads != d_model:
        raise ConversionError(
            f"config.json: head_dim={head_dim} with {heads} heads is not supported "
            f"(riftco needs head_dim * heads == hidden_size, {d_model})"
        )
    kv_heads = (
        positive_int(config, "num_key_value_heads") if config.get("num_key_value_heads") else heads
    )
    return TransformerConfig.preset(
        "llama",
        vocab_size=positive_int(config, "vocab_size"),
        context_length=positive_int(config, "max_position_embeddings"),
        d_model=d_model,
        n_layers=positive_int(config, "num_hidden_layers"),
        n_heads=heads,
        kv_heads=None if kv_heads == heads else int(kv_heads),
        d_ff=positive_int(config, "intermediate_size"),
        norm_eps=number(config, "rms_norm_eps", 1e-6),
        tie_embeddings=boolean(config, "tie_word_embeddings", False),
        rope_theta=number({"rope_theta": theta}, "rope_theta", 10000.0),
    )


def llama_tensors(t: TransformerConfig, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our state dict under Llama's names."""
    out = {
        "model.embed_tokens.weight": arrays["token_embedding.weight"],
        "model.norm.weight": arrays["final_norm.weight"],
    }
    if not t.tie_embeddings:
        out["lm_head.weight"] = arrays["language_model_head.weight"]
    for i in range(t.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        for mine, hf in _NORMS + _LINEARS:
            out[f"{theirs}.{hf}.weight"] = arrays[f"{ours}.{mine}.weight"]
    return float32(out)


def arrays_from_llama(
    t: TransformerConfig, tensors: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Llama tensors under our names."""
    hf = {name: array for name, array in tensors.items() if not name.endswith(IGNORED_SUFFIXES)}
    take = Taker(hf)
    out = {
        "token_embedding.weight": take("model.embed_tokens.weight"),
        "final_norm.weight": take("model.norm.weight"),
    }
    head = take.pop("lm_head.weight")
    if not t.tie_embeddings:
        if head is None:
            raise ConversionError(
                "model weights: expected lm_head.weight (tie_word_embeddings is false)"
            )
        out["language_model_head.weight"] = head
    for i in range(t.n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        for mine, hf_name in _NORMS + _LINEARS:
            out[f"{ours}.{mine}.weight"] = take(f"{theirs}.{hf_name}.weight")
    take.finish()
    return float32(out)
