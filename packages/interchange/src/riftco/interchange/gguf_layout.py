"""llama.cpp's names and layouts for the two architectures riftco exchanges as GGUF.

``gpt2``: ``token_embd``, ``position_embd``, per block ``attn_norm``, ``attn_qkv``
(query, key and value rows stacked, the layout of GPT-2's fused ``c_attn`` after
transposing), ``attn_output``, ``ffn_norm``, ``ffn_up``, ``ffn_down``, each with a
bias; ``output_norm`` and ``output``. llama.cpp computes the tanh form of GELU.

``llama``: ``token_embd``, per block ``attn_norm``, ``attn_q``, ``attn_k``,
``attn_v``, ``attn_output``, ``ffn_norm``, ``ffn_gate``, ``ffn_up``,
``ffn_down``; ``output_norm`` and ``output``. llama.cpp rotates adjacent pairs
(``x[2i]``, ``x[2i + 1]``) where riftco and Hugging Face rotate halves (``x[i]``,
``x[i + head_dim / 2]``), so the query and key rows of each head are interleaved
on the way out (:func:`interleave_heads`) and back on the way in, as llama.cpp's
own converter does.

Arrays here are numpy arrays in row-major order: a weight is ``[out, in]`` (ggml's
``ne`` lists the same dimensions reversed). ``output`` is absent when the head is
tied to the token embedding, and llama.cpp then reuses ``token_embd``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from riftco.interchange.errors import ConversionError
from riftco.interchange.hf_common import Taker, float32
from riftco.nn import TransformerConfig

GPT2 = "gpt2"
LLAMA = "llama"
ARCHITECTURES = (GPT2, LLAMA)

_GPT2_LAYER = (
    ("attention_norm", "attn_norm"),
    ("attention.output", "attn_output"),
    ("feed_forward_norm", "ffn_norm"),
    ("feed_forward.expand", "ffn_up"),
    ("feed_forward.project", "ffn_down"),
)
_LLAMA_LAYER = (
    ("attention_norm", "attn_norm"),
    ("attention.value", "attn_v"),
    ("attention.output", "attn_output"),
    ("feed_forward_norm", "ffn_norm"),
    ("feed_forward.gate", "ffn_gate"),
    ("feed_forward.up", "ffn_up"),
    ("feed_forward.down", "ffn_down"),
)


def architecture_of(config: TransformerConfig) -> str:
    """``gpt2`` for the GPT family, ``llama`` for rotary models."""
    return GPT2 if config.family == "gpt" else LLAMA


def interleave_heads(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from split-half order (``0..d/2-1`` then ``d/2..d-1``) to
    llama.cpp's pairs (``0, d/2, 1, d/2 + 1, ...``)."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def split_heads(weight: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of :func:`interleave_heads`."""
    rows = weight.shape[0]
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def to_gguf_tensors(
    config: TransformerConfig, arrays: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Our state dict under llama.cpp's names and layouts, in llama.cpp's order.

    A bias-free GPT-family model gets zero biases, which llama.cpp's ``gpt2``
    graph requires."""
    out = {"token_embd.weight": arrays["token_embedding.weight"]}
    if config.family == "gpt":
        out["position_embd.weight"] = arrays["position_embedding.weight"]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}", f"blk.{i}"
        if config.family == "gpt":
            _gpt2_block(config, arrays, ours, theirs, out)
        else:
            _llama_block(config, arrays, ours, theirs, out)
    out["output_norm.weight"] = arrays["final_norm.weight"]
    if config.norm == "layer":
        out["output_norm.bias"] = arrays["final_norm.bias"]
    if not config.tie_embeddings:
        out["output.weight"] = arrays["language_model_head.weight"]
    return float32(out)


def from_gguf_tensors(
    config: TransformerConfig, tensors: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """llama.cpp tensors under our names and layouts; names a missing or unexpected one.

    For a GPT-family ``config`` without linear biases, the stored biases must be zero
    and are dropped."""
    take = Taker(dict(tensors))
    out = {"token_embedding.weight": take("token_embd.weight")}
    if config.family == "gpt":
        out["position_embedding.weight"] = take("position_embd.weight")
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}", f"blk.{i}"
        if config.family == "gpt":
            _gpt2_block_back(config, take, ours, theirs, out)
        else:
            _llama_block_back(config, take, ours, theirs, out)
    out["final_norm.weight"] = take("output_norm.weight")
    if config.norm == "layer":
        out["final_norm.bias"] = take("output_norm.bias")
    head = take.pop("output.weight")
    if not config.tie_embeddings:
        if head is None:
            raise ConversionError("tensors: expected output.weight (the head is not tied)")
        out["language_model_head.weight"] = head
    elif head is not None:
        raise ConversionError("tensors: unexpected output.weight (the head is tied)")
    take.finish()
    return float32(out)


def linear_sources(
    config: TransformerConfig,
) -> dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]]:
    """For each linear layer of ``config``'s model (qualified name), the llama.cpp
    tensor its weight comes from and how its rows are taken from that tensor's rows
    (any trailing axes ride along, so the rows may be stored blocks of bytes)."""
    d = config.d_model
    out: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {}

    def rows(k: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda a: a[k * d : (k + 1) * d]

    def heads(n: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda a: split_heads(a, n)

    same: Callable[[np.ndarray], np.ndarray] = lambda a: a  # noqa: E731
    layer: tuple[tuple[str, str], ...]
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}", f"blk.{i}"
        if config.family == "gpt":
            for k, name in enumerate(("query", "key", "value")):
                out[f"{ours}.attention.{name}"] = (f"{theirs}.attn_qkv.weight", rows(k))
            layer = _GPT2_LAYER[1:]
        else:
            out[f"{ours}.attention.query"] = (f"{theirs}.attn_q.weight", heads(config.n_heads))
            out[f"{ours}.attention.key"] = (f"{theirs}.attn_k.weight", heads(config.n_kv_heads))
            layer = _LLAMA_LAYER[1:]
        for mine, name in layer:
            if not mine.endswith("norm"):
                out[f"{ours}.{mine}"] = (f"{theirs}.{name}.weight", same)
    return out


def _gpt2_block(
    c: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    ours: str,
    theirs: str,
    out: dict[str, np.ndarray],
) -> None:
    parts = [f"{ours}.attention.{n}" for n in ("query", "key", "value")]
    out[f"{theirs}.attn_norm.weight"] = arrays[f"{ours}.attention_norm.weight"]
    out[f"{theirs}.attn_norm.bias"] = arrays[f"{ours}.attention_norm.bias"]
    out[f"{theirs}.attn_qkv.weight"] = np.concatenate([arrays[f"{p}.weight"] for p in parts])
    out[f"{theirs}.attn_qkv.bias"] = np.concatenate([_bias(c, arrays, p) for p in parts])
    for mine, name in _GPT2_LAYER[1:]:
        prefix = f"{ours}.{mine}"
        if mine.endswith("norm"):
            out[f"{theirs}.{name}.weight"] = arrays[f"{prefix}.weight"]
            out[f"{theirs}.{name}.bias"] = arrays[f"{prefix}.bias"]
        else:
            out[f"{theirs}.{name}.weight"] = arrays[f"{prefix}.weight"]
            out[f"{theirs}.{name}.bias"] = _bias(c, arrays, prefix)


def _gpt2_block_back(
    c: TransformerConfig, take: Taker, ours: str, theirs: str, out: dict[str, np.ndarray]
) -> None:
    d = c.d_model
    out[f"{ours}.attention_norm.weight"] = take(f"{theirs}.attn_norm.weight")
    out[f"{ours}.attention_norm.bias"] = take(f"{theirs}.attn_norm.bias")
    weight, bias = take(f"{theirs}.attn_qkv.weight"), take(f"{theirs}.attn_qkv.bias")
    if weight.shape != (3 * d, d) or bias.shape != (3 * d,):
        raise ConversionError(
            f"{theirs}.attn_qkv: expected weight [{3 * d}, {d}] and bias [{3 * d}] "
            f"(numpy order); found {list(weight.shape)} and {list(bias.shape)}"
        )
    for k, name in enumerate(("query", "key", "value")):
        out[f"{ours}.attention.{name}.weight"] = weight[k * d : (k + 1) * d]
        _set_bias(c, out, f"{ours}.attention.{name}", bias[k * d : (k + 1) * d], theirs)
    for mine, name in _GPT2_LAYER[1:]:
        out[f"{ours}.{mine}.weight"] = take(f"{theirs}.{name}.weight")
        stored = take(f"{theirs}.{name}.bias")
        if mine.endswith("norm"):
            out[f"{ours}.{mine}.bias"] = stored
        else:
            _set_bias(c, out, f"{ours}.{mine}", stored, f"{theirs}.{name}")


def _llama_block(
    c: TransformerConfig,
    arrays: Mapping[str, np.ndarray],
    ours: str,
    theirs: str,
    out: dict[str, np.ndarray],
) -> None:
    out[f"{theirs}.attn_norm.weight"] = arrays[f"{ours}.attention_norm.weight"]
    query, key = arrays[f"{ours}.attention.query.weight"], arrays[f"{ours}.attention.key.weight"]
    out[f"{theirs}.attn_q.weight"] = interleave_heads(query, c.n_heads)
    out[f"{theirs}.attn_k.weight"] = interleave_heads(key, c.n_kv_heads)
    for mine, name in _LLAMA_LAYER[1:]:
        out[f"{theirs}.{name}.weight"] = arrays[f"{ours}.{mine}.weight"]


def _llama_block_back(
    c: TransformerConfig, take: Taker, ours: str, theirs: str, out: dict[str, np.ndarray]
) -> None:
    out[f"{ours}.attention_norm.weight"] = take(f"{theirs}.attn_norm.weight")
    for name, heads, ggml in (
        ("query", c.n_heads, "attn_q"),
        ("key", c.n_kv_heads, "attn_k"),
    ):
        weight = take(f"{theirs}.{ggml}.weight")
        expected = (heads * c.head_dim, c.d_model)
        if weight.shape != expected:
            raise ConversionError(
                f"{theirs}.{ggml}.weight: expected {list(expected)} (numpy order); "
                f"found {list(weight.shape)}"
            )
        out[f"{ours}.attention.{name}.weight"] = split_heads(weight, heads)
    for mine, name in _LLAMA_LAYER[1:]:
        out[f"{ours}.{mine}.weight"] = take(f"{theirs}.{name}.weight")


def _bias(c: TransformerConfig, arrays: Mapping[str, np.ndarray], prefix: str) -> np.ndarray:
    if c.linear_bias:
        return arrays[f"{prefix}.bias"]
    return np.zeros(arrays[f"{prefix}.weight"].shape[0], np.float32)


def _set_bias(
    c: TransformerConfig, out: dict[str, np.ndarray], prefix: str, bias: np.ndarray, where: str
) -> None:
    if c.linear_bias:
        out[f"{prefix}.bias"] = bias
    elif np.any(bias):
        raise ConversionError(
            f"{where}: the model has no linear biases (linear_bias false), but the file "
            "holds non-zero ones"
        )
