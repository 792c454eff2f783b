"""A numpy forward pass that reads a GGUF file the way llama.cpp does.

It shares nothing with riftco's model or its GGUF mapping: tensors come straight
from ``gguf.GGUFReader`` under llama.cpp's names, their shapes are checked in
ggml's ``ne`` order against what llama.cpp's loader asks for, and the graph
follows llama.cpp's ``gpt2`` and ``llama`` builders: ``ggml_mul_mat(w, x)`` is
``x @ w.T`` for a weight stored ``ne = [in, out]``; ``gpt2`` splits the fused
``attn_qkv`` output into query, key and value columns and applies the tanh form of
GELU (``ggml_gelu``); ``llama`` rotates adjacent pairs (rope mode 0) with
``theta = position * freq_base^(-2i / n_rot)`` and lets query head ``h`` read
key/value head ``h // (n_head / n_head_kv)``. Arithmetic is float64, so the
result is the exact value that llama.cpp approximates (it computes in float32,
with GELU through a float16 table).

Comparing these logits with riftco's checks that an exported file means to
llama.cpp what the model means to riftco.

``activations="ggml"`` also converts the input of every matrix product the way
llama.cpp's CPU backend does for the weight's type before it multiplies (its
``vec_dot_type``), so the float64 result is the exact value of what llama.cpp
computes on quantized weights rather than of the weights alone: Q8_0, Q4_0 and Q5_0
weights take the input quantized per block of 32 by ggml's ``quantize_row_q8_0`` as
it runs on x86-64 (``a = max |x|`` in float32, the scale ``a / 127`` rounded to a
half, the codes ``x * (127 / a)`` rounded to nearest with ties to even), F16 weights
take it rounded to half, F32 weights as it is; other types are refused. ``gelu="ggml"``
computes ``gpt2``'s GELU through ggml's table of halves (:func:`ggml_gelu`) as
llama.cpp's CPU backend does, where the default is the exact tanh form. This is
written from ggml's definitions and shares no code with riftco's kernels. It models a float32 key/value cache (llama.cpp's default is F16,
whose rounding it leaves out).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np

Activations = Literal["exact", "ggml"]
#: ggml types whose products take the input as Q8_0 blocks (``vec_dot_type``).
_Q8_0_INPUT = frozenset({"Q8_0", "Q4_0", "Q5_0"})


def llamacpp_logits(
    path: str | os.PathLike[str],
    tokens: Sequence[int],
    activations: Activations = "exact",
    gelu: Activations = "exact",
) -> np.ndarray:
    """Logits ``[len(tokens), n_vocab]`` (float64) of one sequence at positions 0, 1, ...;
    ``activations="ggml"`` converts each product's input as llama.cpp's CPU backend does
    for the weight's type, ``gelu="ggml"`` takes GELU from ggml's table of halves (see
    the module docstring)."""
    if activations not in ("exact", "ggml"):
        raise ValueError(f"activations: expected 'exact' or 'ggml'; found {activations!r}")
    if gelu not in ("exact", "ggml"):
        raise ValueError(f"gelu: expected 'exact' or 'ggml'; found {gelu!r}")
    file = _Gguf(path, activations)
    file.gelu = gelu
    ids = np.asarray(tokens, dtype=np.int64)
    if file.arch == "gpt2":
        return _gpt2(file, ids)
    if file.arch == "llama":
        return _llama(file, ids)
    raise ValueError(f"{path}: expected architecture gpt2 or llama; found {file.arch!r}")


class _Weight(np.ndarray):
    """A tensor's values (float64) with how a product converts its input: ``ggml_type``
    (the tensor's type) under ``activations="ggml"``, None to keep the input exact."""

    ggml_type: str | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.ggml_type = getattr(obj, "ggml_type", None)


def ggml_q8_0_input(x: np.ndarray) -> np.ndarray:
    """``x [..., k]`` (``k`` a multiple of 32) as the Q8_0 blocks ggml's x86-64
    ``quantize_row_q8_0`` makes of its float32 values, dequantized exactly (float64)."""
    x32 = np.asarray(x, np.float32)
    if x32.shape[-1] % 32:
        raise ValueError(f"Q8_0 input: rows of a multiple of 32 values; found {x32.shape[-1]}")
    blocks = x32.reshape(*x32.shape[:-1], -1, 32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        amax = np.abs(blocks).max(axis=-1, keepdims=True)
        d = (amax / np.float32(127)).astype(np.float16).astype(np.float64)
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.clip(np.rint(np.nan_to_num(blocks * inv, nan=0.0)), -128, 127)
        return (q.astype(np.float64) * d).reshape(x32.shape)


def _converted_input(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    kind = getattr(w, "ggml_type", None)
    if kind is None or kind == "F32":
        return x
    if kind in _Q8_0_INPUT:
        return ggml_q8_0_input(x)
    if kind == "F16":
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)
    raise ValueError(f"activations='ggml': the input conversion for {kind} weights is not modelled")


class _Gguf:
    def __init__(self, path: str | os.PathLike[str], activations: str = "exact") -> None:
        import gguf

        reader = gguf.GGUFReader(path)
        self.fields = {name: item.contents() for name, item in reader.fields.items()}
        self.arch = self.fields["general.architecture"]
        self.gelu = "exact"
        self.tensors: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
        for t in reader.tensors:
            values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            ne = tuple(int(d) for d in t.shape)
            weight = np.asarray(values, np.float64).reshape(ne[::-1]).view(_Weight)
            weight.ggml_type = t.tensor_type.name if activations == "ggml" else None
            self.tensors[t.name] = (ne, weight)

    def key(self, name: str, default: Any = None) -> Any:
        value = self.fields.get(f"{self.arch}.{name}", default)
        if value is None:
            raise KeyError(f"{self.arch}.{name}")
        return value

    @overload
    def tensor(
        self, name: str, ne: tuple[int, ...], required: Literal[True] = True
    ) -> np.ndarray: ...
    @overload
    def tensor(self, name: str, ne: tuple[int, ...], required: bool) -> np.ndarray | None: ...
    def tensor(self, name: str, ne: tuple[int, ...], required: bool = True) -> np.ndarray | None:
        """The tensor with ggml dimensions ``ne`` (numpy shape ``ne`` reversed)."""
        if name not in self.tensors:
            if required:
                raise KeyError(f"missing tensor {name}")
            return None
        found, values = self.tensors[name]
        if found != ne:
            raise ValueError(f"{name}: llama.cpp expects ne={list(ne)}; found {list(found)}")
        return values


def _mul_mat(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.asarray(_converted_input(w, np.asarray(x)) @ np.asarray(w).T)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered**2).mean(-1, keepdims=True) + eps) * w + b


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * x * (1.0 + 0.044715 * x * x)))


def ggml_gelu(x: np.ndarray) -> np.ndarray:
    """GELU as ggml's CPU backend computes it: 0 at or below -10, ``x`` at or above 10,
    else ``x`` rounded to a half, looked up in a table of halves (the tanh form at each
    half, computed in float32 and rounded to a half)."""
    x32 = np.asarray(x, np.float32)
    h = x32.astype(np.float16).astype(np.float32)
    c, a = np.float32(math.sqrt(2.0 / math.pi)), np.float32(0.044715)
    with np.errstate(over="ignore", invalid="ignore"):
        g = np.float32(0.5) * h * (np.float32(1) + np.tanh(c * h * (np.float32(1) + a * h * h)))
    table = g.astype(np.float32).astype(np.float16).astype(np.float64)
    return np.where(x32 <= -10, 0.0, np.where(x32 >= 10, x32.astype(np.float64), table))


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``q [T, H, d]``, ``k``/``v`` ``[T, Hkv, d]``: causal, scaled by ``1/sqrt(d)``."""
    n_tokens, n_head, head_dim = q.shape
    group = n_head // k.shape[1]
    future = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), 1)
    out = np.empty_like(q)
    for h in range(n_head):
        scores = q[:, h] @ k[:, h // group].T / math.sqrt(head_dim)
        scores[future] = -np.inf
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, h] = (weights / weights.sum(-1, keepdims=True)) @ v[:, h // group]
    return out.reshape(n_tokens, n_head * head_dim)


def _gpt2(f: _Gguf, tokens: np.ndarray) -> np.ndarray:
    n_embd, n_head, n_ff = (
        f.key("embedding_length"),
        f.key("attention.head_count"),
        f.key("feed_forward_length"),
    )
    n_vocab, eps = len(f.fields["tokenizer.ggml.tokens"]), f.key("attention.layer_norm_epsilon")
    n_ctx = f.key("context_length")
    tok_embd = f.tensor("token_embd.weight", (n_embd, n_vocab))
    pos_embd = f.tensor("position_embd.weight", (n_embd, n_ctx))
    x = np.asarray(tok_embd[tokens] + pos_embd[np.arange(len(tokens))])
    for i in range(f.key("block_count")):
        p = f"blk.{i}."

        def t(name: str, *ne: int, p: str = p) -> np.ndarray:
            return f.tensor(p + name, ne)

        cur = _layer_norm(x, t("attn_norm.weight", n_embd), t("attn_norm.bias", n_embd), eps)
        qkv = _mul_mat(t("attn_qkv.weight", n_embd, 3 * n_embd), cur) + t(
            "attn_qkv.bias", 3 * n_embd
        )
        q, k, v = (
            qkv[:, j * n_embd : (j + 1) * n_embd].reshape(-1, n_head, n_embd // n_head)
            for j in range(3)
        )
        cur = _mul_mat(t("attn_output.weight", n_embd, n_embd), _attention(q, k, v))
        ffn_inp = cur + t("attn_output.bias", n_embd) + x
        cur = _layer_norm(ffn_inp, t("ffn_norm.weight", n_embd), t("ffn_norm.bias", n_embd), eps)
        up = _mul_mat(t("ffn_up.weight", n_embd, n_ff), cur) + t("ffn_up.bias", n_ff)
        cur = ggml_gelu(up) if f.gelu == "ggml" else _gelu(up)
        cur = _mul_mat(t("ffn_down.weight", n_ff, n_embd), cur) + t("ffn_down.bias", n_embd)
        x = cur + ffn_inp
    x = _layer_norm(
        x, f.tensor("output_norm.weight", (n_embd,)), f.tensor("output_norm.bias", (n_embd,)), eps
    )
    output = f.tensor("output.weight", (n_embd, n_vocab), required=False)
    return _mul_mat(tok_embd if output is None else output, x)


def _rope(x: np.ndarray, n_rot: int, freq_base: float) -> np.ndarray:
    """Rope mode 0: pairs ``(x[2i], x[2i + 1])`` of each head turn by ``pos * base^(-2i/n_rot)``."""
    positions = np.arange(x.shape[0], dtype=np.float64)[:, None, None]
    theta = positions * freq_base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    cos, sin = np.cos(theta), np.sin(theta)
    even, odd = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out = x.copy()
    out[..., 0:n_rot:2] = even * cos - odd * sin
    out[..., 1:n_rot:2] = even * sin + odd * cos
    return out


def _llama(f: _Gguf, tokens: np.ndarray) -> np.ndarray:
    n_embd, n_head, n_ff = (
        f.key("embedding_length"),
        f.key("attention.head_count"),
        f.key("feed_forward_length"),
    )
    n_head_kv = f.key("attention.head_count_kv", n_head)
    head_dim = n_embd // n_head
    n_rot, eps = f.key("rope.dimension_count", head_dim), f.key("attention.layer_norm_rms_epsilon")
    freq_base = f.key("rope.freq_base", 10000.0)
    n_vocab, n_gqa = len(f.fields["tokenizer.ggml.tokens"]), head_dim * n_head_kv
    tok_embd = f.tensor("token_embd.weight", (n_embd, n_vocab))
    x = np.asarray(tok_embd[tokens])
    n_tokens = len(tokens)
    for i in range(f.key("block_count")):
        p = f"blk.{i}."

        def t(name: str, *ne: int, p: str = p) -> np.ndarray:
            return f.tensor(p + name, ne)

        cur = _rms_norm(x, t("attn_norm.weight", n_embd), eps)
        q = _mul_mat(t("attn_q.weight", n_embd, n_embd), cur).reshape(n_tokens, n_head, head_dim)
        k = _mul_mat(t("attn_k.weight", n_embd, n_gqa), cur).reshape(n_tokens, n_head_kv, head_dim)
        v = _mul_mat(t("attn_v.weight", n_embd, n_gqa), cur).reshape(n_tokens, n_head_kv, head_dim)
        q, k = _rope(q, n_rot, freq_base), _rope(k, n_rot, freq_base)
        ffn_inp = _mul_mat(t("attn_output.weight", n_embd, n_embd), _attention(q, k, v)) + x
        cur = _rms_norm(ffn_inp, t("ffn_norm.weight", n_embd), eps)
        gate = _mul_mat(t("ffn_gate.weight", n_embd, n_ff), cur)
        up = _mul_mat(t("ffn_up.weight", n_embd, n_ff), cur)
        x = _mul_mat(t("ffn_down.weight", n_ff, n_embd), gate / (1.0 + np.exp(-gate)) * up)
        x = x + ffn_inp
    x = _rms_norm(x, f.tensor("output_norm.weight", (n_embd,)), eps)
    output = f.tensor("output.weight", (n_embd, n_vocab), required=False)
    return _mul_mat(tok_embd if output is None else output, x)
