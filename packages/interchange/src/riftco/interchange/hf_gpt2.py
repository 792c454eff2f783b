"""GPT-2: riftco names and config to ``GPT2LMHeadModel``'s, and back.

GPT-2 stores its linears as ``Conv1D`` (weight ``[in, out]``, the transpose of
ours) and fuses query, key and value into one ``c_attn`` whose output columns
are ``[q | k | v]``. Its ``attn.bias``/``attn.masked_bias`` entries, written by
old versions, are causal-mask buffers, not parameters, and are ignored.
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
    string,
)
from riftco.nn import TransformerConfig

ARCHITECTURE = "GPT2LMHeadModel"
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
_ACTIVATIONS = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
# Keys whose non-default value changes the math in a way riftco does not implement.
_REFUSED = {
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "scale_attn_weights": True,
    "add_cross_attention": False,
}


def gpt2_config(t: TransformerConfig, bos_id: int | None, eos_id: int | None) -> dict[str, Any]:
    """``config.json`` for ``t``; refuses what GPT-2 cannot represent."""
    found = (t.norm, t.positions, t.feed_forward)
    if found != ("layer", "learned", "gelu"):
        raise ConversionError(
            "GPT-2 export needs LayerNorm, learned positions and a GELU feed-forward; found "
            f"norm={t.norm!r}, positions={t.positions!r}, feed_forward={t.feed_forward!r}"
        )
    if t.head_bias:
        raise ConversionError(
            "GPT-2 has no language-model head bias, and this model has one (head_bias, as in the "
            "riftco_v1 preset); export it as a .rift bundle or SafeTensors instead"
        )
    if t.sliding_window is not None:
        raise ConversionError(
            f"GPT-2 has no sliding-window attention; found sliding_window={t.sliding_window}"
        )
    if t.n_kv_heads != t.n_heads:
        raise ConversionError(
            f"GPT-2 has no grouped-query attention; found kv_heads={t.n_kv_heads}"
        )
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "gpt2",
        "vocab_size": t.vocab_size,
        "n_positions": t.context_length,
        "n_ctx": t.context_length,
        "n_embd": t.d_model,
        "n_layer": t.n_layers,
        "n_head": t.n_heads,
        "n_inner": t.d_ff,
        "activation_function": "gelu" if t.gelu == "exact" else "gelu_new",
        "layer_norm_epsilon": t.norm_eps,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": t.tie_embeddings,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "dtype": "float32",
    }


def config_from_gpt2(config: Mapping[str, Any]) -> TransformerConfig:
    """Our configuration for a ``GPT2LMHeadModel`` config; refuses keys whose math we lack."""
    refuse_unsupported(config, _REFUSED)
    activation = string(config, "activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise ConversionError(
            f"config.json: activation_function {activation!r} is not supported; "
            f"expected one of {sorted(_ACTIVATIONS)}"
        )
    d_model = positive_int(config, "n_embd")
    inner = config.get("n_inner")
    return TransformerConfig.preset(
        "gpt2",
        vocab_size=positive_int(config, "vocab_size"),
        context_length=positive_int(config, "n_positions"),
        d_model=d_model,
        n_layers=positive_int(config, "n_layer"),
        n_heads=positive_int(config, "n_head"),
        d_ff=4 * d_model if inner is None else positive_int(config, "n_inner"),
        norm_eps=number(config, "layer_norm_epsilon", 1e-5),
        gelu=_ACTIVATIONS[activation],
        tie_embeddings=boolean(config, "tie_word_embeddings", True),
    )


def gpt2_tensors(t: TransformerConfig, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our state dict under GPT-2's names and layouts (biases a bias-free model lacks are zero)."""
    out = {
        "transformer.wte.weight": arrays["token_embedding.weight"],
        "transformer.wpe.weight": arrays["position_embedding.weight"],
        "transformer.ln_f.weight": arrays["final_norm.weight"],
        "transformer.ln_f.bias": arrays["final_norm.bias"],
    }
    if not t.tie_embeddings:
        out["lm_head.weight"] = arrays["language_model_head.weight"]
    for i in range(t.n_layers):
        ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
        out[f"{theirs}.ln_1.weight"] = arrays[f"{ours}.attention_norm.weight"]
        out[f"{theirs}.ln_1.bias"] = arrays[f"{ours}.attention_norm.bias"]
        out[f"{theirs}.ln_2.weight"] = arrays[f"{ours}.feed_forward_norm.weight"]
        out[f"{theirs}.ln_2.bias"] = arrays[f"{ours}.feed_forward_norm.bias"]
        qkv = [f"{ours}.attention.{n}" for n in ("query", "key", "value")]
        out[f"{theirs}.attn.c_attn.weight"] = np.concatenate(
            [arrays[f"{n}.weight"] for n in qkv], axis=0
        ).T
        out[f"{theirs}.attn.c_attn.bias"] = np.concatenate([_bias(arrays, n, t) for n in qkv])
        for hf, mine in (
            ("attn.c_proj", "attention.output"),
            ("mlp.c_fc", "feed_forward.expand"),
            ("mlp.c_proj", "feed_forward.project"),
        ):
            out[f"{theirs}.{hf}.weight"] = arrays[f"{ours}.{mine}.weight"].T
            out[f"{theirs}.{hf}.bias"] = _bias(arrays, f"{ours}.{mine}", t)
    return float32(out)


def arrays_from_gpt2(
    t: TransformerConfig, tensors: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """GPT-2 tensors (``transformer.`` prefix optional) under our names and layouts."""
    hf = {
        _strip(name): array
        for name, array in tensors.items()
        if not name.endswith(IGNORED_SUFFIXES)
    }
    take = Taker(hf)
    d = t.d_model
    out = {
        "token_embedding.weight": take("wte.weight"),
        "position_embedding.weight": take("wpe.weight"),
        "final_norm.weight": take("ln_f.weight"),
        "final_norm.bias": take("ln_f.bias"),
    }
    head = take.pop("lm_head.weight")
    if not t.tie_embeddings:
        if head is None:
            raise ConversionError(
                "model weights: expected lm_head.weight (tie_word_embeddings is false)"
            )
        out["language_model_head.weight"] = head
    for i in range(t.n_layers):
        ours, theirs = f"blocks.{i}", f"h.{i}"
        out[f"{ours}.attention_norm.weight"] = take(f"{theirs}.ln_1.weight")
        out[f"{ours}.attention_norm.bias"] = take(f"{theirs}.ln_1.bias")
        out[f"{ours}.feed_forward_norm.weight"] = take(f"{theirs}.ln_2.weight")
        out[f"{ours}.feed_forward_norm.bias"] = take(f"{theirs}.ln_2.bias")
        weight, bias = take(f"{theirs}.attn.c_attn.weight"), take(f"{theirs}.attn.c_attn.bias")
        if weight.shape != (d, 3 * d) or bias.shape != (3 * d,):
            raise ConversionError(
                f"{theirs}.attn.c_attn: expected weight [{d}, {3 * d}] and bias [{3 * d}]; "
                f"found {list(weight.shape)} and {list(bias.shape)}"
            )
        for k, name in enumerate(("query", "key", "value")):
            out[f"{ours}.attention.{name}.weight"] = weight[:, k * d : (k + 1) * d].T
            out[f"{ours}.attention.{name}.bias"] = bias[k * d : (k + 1) * d]
        for hf_name, mine in (
            ("attn.c_proj", "attention.output"),
            ("mlp.c_fc", "feed_forward.expand"),
            ("mlp.c_proj", "feed_forward.project"),
        ):
            out[f"{ours}.{mine}.weight"] = take(f"{theirs}.{hf_name}.weight").T
            out[f"{ours}.{mine}.bias"] = take(f"{theirs}.{hf_name}.bias")
    take.finish()
    return float32(out)


def _strip(name: str) -> str:
    return name.removeprefix("transformer.")


def _bias(arrays: Mapping[str, np.ndarray], prefix: str, t: TransformerConfig) -> np.ndarray:
    if t.linear_bias:
        return arrays[f"{prefix}.bias"]
    return np.zeros(arrays[f"{prefix}.weight"].shape[0], np.float32)
