"""Whole-step decoding: a decoder-only Transformer compiled once (``Decoder``), then
one backend call per incremental step instead of one per op.

This module is the contract of the backend capability ``decode_step`` (API 1.7), not a
decoder: riftco-nn's op-by-op forward is the definition of a step, and the reference
every native step is tested against. riftco-nn describes its model in one place
(``riftco.nn.native_decode``) with the tensor-level classes below; `Decoder` checks
every shape once, lowers the description to the storage-level `DecodeSpec` and
dispatches to ``Backend.decode_program`` / ``Backend.decode_step``. A backend without
the native kernel has no whole-step decoder (``Decoder.available`` is false) and its
models decode op by op, on their own device.

A step's new tokens are packed sequence after sequence. A step embeds them, runs every
block (norm, query/key/value, rotary positions, the keys and values written into the
cache at ``cache_rows``, causal attention over each sequence's cached keys, the output
projection and the feed-forward layer, each with its residual), then the final norm and
the head for the rows in ``logit_rows``. The cache is either contiguous (sequence ``j``
reads key rows ``kv_starts[j]`` onward) or paged (pools ``[pages * page_size, kv_heads,
head_dim]`` read through a page table).

Adding a topology feature to whole-step decoding: the op-by-op layer and its
description in riftco-nn, a field of the schema here, and the native step
(riftco-kernels ``decode``, read by the CPU backend's ``decode_program``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from riftco.tensor.backend import Backend, Storage
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops.blockquant import BlockWeight
from riftco.tensor.ops.quantized import NF4Weight
from riftco.tensor.tensor import Tensor

#: Feed-forward kinds and their number of linears (GELU: expand, project;
#: SwiGLU: gate, up, down).
FEED_FORWARDS = {"gelu": 2, "gelu_tanh": 2, "swiglu": 3}


@dataclass(frozen=True)
class DecodeLinear:
    """Backend level: ``y = x @ W^T (+ bias)``, ``W [rows, cols]``. ``format`` ``f32``: ``arrays`` is
    ``(weight,)``; ``q8_0`` / ``q4_0`` / ``f16``: ``(data,)`` (uint8 block rows); ``nf4``:
    ``(codes, absmax)`` or ``(codes, absmax, group_range)``."""

    format: str
    arrays: tuple[Storage, ...]
    shape: tuple[int, int]
    bias: Storage | None = None
    block_size: int = 0
    offset: float = 0.0


@dataclass(frozen=True)
class DecodeLayer:
    attention_norm: tuple[Storage | None, Storage | None]
    query: DecodeLinear
    key: DecodeLinear
    value: DecodeLinear
    output: DecodeLinear
    feed_forward_norm: tuple[Storage | None, Storage | None]
    feed_forward: str
    feed_forward_linears: tuple[DecodeLinear, ...]


@dataclass(frozen=True)
class DecodeSpec:
    """A model for ``Backend.decode_program``: sizes, topology and storage handles."""

    d_model: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    window: int
    norm: str  # "layer" | "rms"
    eps: float
    rope_theta: float | None  # None: learned positions
    token_embedding: Storage
    position_embedding: Storage | None
    context: int
    layers: tuple[DecodeLayer, ...]
    final_norm: tuple[Storage | None, Storage | None]
    head: DecodeLinear


class DecodeBatch(NamedTuple):
    """One step for ``Backend.decode_step``: int64 ``tokens``, ``positions`` and
    ``cache_rows`` ``[N]`` (storage), every layer's ``keys`` / ``values`` cache (storage,
    written in place), ``logit_rows``, and per sequence its query rows
    (``q_starts``, ``q_counts``) and keys: ``kv_starts`` / ``kv_lengths`` in a contiguous
    cache, or its first ``kv_lengths`` positions through ``page_table`` (int64 storage
    ``[S, table_width]``) over pages of ``page_size``."""

    tokens: Storage
    positions: Storage
    cache_rows: Storage
    rows: int
    keys: tuple[Storage, ...]
    values: tuple[Storage, ...]
    cache_shape: tuple[int, int, int]
    logit_rows: tuple[int, ...]
    q_starts: tuple[int, ...]
    q_counts: tuple[int, ...]
    kv_starts: tuple[int, ...]
    kv_lengths: tuple[int, ...]
    page_table: Storage | None = None
    table_width: int = 0
    page_size: int = 0


@dataclass(frozen=True)
class DecoderLinear:
    """A linear layer of a `Decoder`: a float32 Tensor ``[rows, cols]``, a `BlockWeight` or
    an `NF4Weight`, and an optional float32 bias ``[rows]``."""

    weight: Tensor | BlockWeight | NF4Weight
    bias: Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        s = self.weight.shape
        return (int(s[0]), int(s[1]))


@dataclass(frozen=True)
class DecoderNorm:
    """A norm's weight and (layer norm) bias, float32 ``[d_model]``, either may be None."""

    weight: Tensor | None = None
    bias: Tensor | None = None


@dataclass(frozen=True)
class DecoderLayer:
    attention_norm: DecoderNorm
    query: DecoderLinear
    key: DecoderLinear
    value: DecoderLinear
    output: DecoderLinear
    feed_forward_norm: DecoderNorm
    feed_forward: str  # "gelu" | "gelu_tanh" | "swiglu"
    feed_forward_linears: tuple[DecoderLinear, ...]


def _f32(what: str, t: Tensor | None, shape: tuple[int, ...], backend: Backend) -> Storage | None:
    if t is None:
        return None
    if not isinstance(t, Tensor) or t.dtype is not DType.float32 or t.shape != shape:
        found = f"{t.dtype.value} {t.shape}" if isinstance(t, Tensor) else type(t).__name__
        raise ShapeError(f"Decoder: {what} must be float32 {shape}, found {found}")
    if t.backend != backend:
        raise ShapeError(f"Decoder: {what} is on {t.backend.name}, the embedding on {backend.name}")
    return t._data


def _linear(what: str, lin: DecoderLinear, rows: int, cols: int, backend: Backend) -> DecodeLinear:
    if lin.shape != (rows, cols):
        raise ShapeError(f"Decoder: {what} must be [{rows}, {cols}], found {list(lin.shape)}")
    w = lin.weight
    bias = _f32(f"{what}.bias", lin.bias, (rows,), backend)
    if isinstance(w, BlockWeight):
        if w.data.backend != backend:
            raise ShapeError(f"Decoder: {what} is on {w.data.backend.name}")
        return DecodeLinear(w.format, (w.data._data,), (rows, cols), bias)
    if isinstance(w, NF4Weight):
        if w.codes.backend != backend:
            raise ShapeError(f"Decoder: {what} is on {w.codes.backend.name}")
        arrays: tuple[Storage, ...] = (w.codes._data, w.absmax._data)
        if w.group_range is not None:
            arrays += (w.group_range._data,)
        return DecodeLinear(
            "nf4", arrays, (rows, cols), bias, int(w.block_size), float(np.float32(w.offset))
        )
    data = _f32(what, w, (rows, cols), backend)
    return DecodeLinear("f32", (data,), (rows, cols), bias)


class Decoder:
    """A decoder-only Transformer compiled for whole-step decoding on the backend of its
    token embedding (``Decoder.available(backend)`` says whether it can). The tensors
    are read in place: writing into them (``assign_``) changes what the next step
    computes; replacing them needs a new Decoder.

    ``norm`` is ``layer`` or ``rms``; ``rope_theta`` None means learned positions
    (``position_embedding [context, d_model]``), else rotary positions with that base.
    """

    def __init__(
        self,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        norm: str,
        eps: float,
        token_embedding: Tensor,
        layers: Sequence[DecoderLayer],
        final_norm: DecoderNorm,
        head: DecoderLinear,
        position_embedding: Tensor | None = None,
        rope_theta: float | None = None,
        window: int = 0,
        scale: float | None = None,
    ) -> None:
        if not isinstance(token_embedding, Tensor) or token_embedding.ndim != 2:
            raise ShapeError("Decoder: token_embedding must be a float32 Tensor [vocab, d_model]")
        backend = token_embedding.backend
        if not Decoder.available(backend):
            raise backend._missing("decode_step")
        vocab, d = token_embedding.shape
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads or head_dim <= 0:
            raise ShapeError(
                f"Decoder: {heads} heads over {kv_heads} key/value heads of {head_dim}"
            )
        if norm not in ("layer", "rms"):
            raise ShapeError(f"Decoder: norm must be 'layer' or 'rms', found {norm!r}")
        if (position_embedding is None) == (rope_theta is None):
            raise ShapeError(
                "Decoder: give exactly one of position_embedding (learned) and rope_theta"
            )
        qw, kvw = heads * head_dim, kv_heads * head_dim
        context = 0
        if position_embedding is not None:
            context = int(position_embedding.shape[0]) if position_embedding.ndim == 2 else 0
            _f32("position_embedding", position_embedding, (context, d), backend)

        def norm_of(what: str, n: DecoderNorm) -> tuple[Storage | None, Storage | None]:
            bias = _f32(f"{what}.bias", n.bias, (d,), backend) if norm == "layer" else None
            if norm == "rms" and n.bias is not None:
                raise ShapeError(f"Decoder: {what} is an RMS norm and takes no bias")
            return (_f32(f"{what}.weight", n.weight, (d,), backend), bias)

        specs = []
        for i, layer in enumerate(layers):
            at = f"layers[{i}]"
            count = FEED_FORWARDS.get(layer.feed_forward)
            ff = layer.feed_forward_linears
            if count is None or len(ff) != count:
                raise ShapeError(
                    f"Decoder: {at}.feed_forward must be one of {sorted(FEED_FORWARDS)} with "
                    f"its linears, found {layer.feed_forward!r} with {len(ff)}"
                )
            hidden = ff[0].shape[0]
            ff_specs: tuple[DecodeLinear, ...]
            if layer.feed_forward == "swiglu":
                ff_specs = (
                    _linear(f"{at}.gate", ff[0], hidden, d, backend),
                    _linear(f"{at}.up", ff[1], hidden, d, backend),
                    _linear(f"{at}.down", ff[2], d, hidden, backend),
                )
            else:
                ff_specs = (
                    _linear(f"{at}.expand", ff[0], hidden, d, backend),
                    _linear(f"{at}.project", ff[1], d, hidden, backend),
                )
            specs.append(
                DecodeLayer(
                    norm_of(f"{at}.attention_norm", layer.attention_norm),
                    _linear(f"{at}.query", layer.query, qw, d, backend),
                    _linear(f"{at}.key", layer.key, kvw, d, backend),
                    _linear(f"{at}.value", layer.value, kvw, d, backend),
                    _linear(f"{at}.output", layer.output, d, qw, backend),
                    norm_of(f"{at}.feed_forward_norm", layer.feed_forward_norm),
                    layer.feed_forward,
                    ff_specs,
                )
            )
        self.spec = DecodeSpec(
            d_model=int(d),
            vocab=int(vocab),
            heads=int(heads),
            kv_heads=int(kv_heads),
            head_dim=int(head_dim),
            scale=float(1.0 / np.sqrt(head_dim) if scale is None else scale),
            window=int(window),
            norm=norm,
            eps=float(eps),
            rope_theta=None if rope_theta is None else float(rope_theta),
            token_embedding=_f32("token_embedding", token_embedding, (vocab, d), backend),
            position_embedding=None if position_embedding is None else position_embedding._data,
            context=context,
            layers=tuple(specs),
            final_norm=norm_of("final_norm", final_norm),
            head=_linear("head", head, vocab, d, backend),
        )
        self.backend = backend
        self._program = backend.decode_program(self.spec)
        self._caches: tuple[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int, int]] = (
            ((), ()),
            (0, 0, 0),
        )

    @staticmethod
    def available(backend: Backend) -> bool:
        """Whether ``backend`` has a native whole-step kernel (``decode_step``); without
        one a model decodes op by op (riftco-nn)."""
        return "decode_step" in backend.capabilities()

    def step(
        self,
        tokens: Sequence[int] | np.ndarray,
        positions: Sequence[int] | np.ndarray,
        cache_rows: Sequence[int] | np.ndarray,
        keys: Sequence[Tensor],
        values: Sequence[Tensor],
        logit_rows: Sequence[int],
        q_starts: Sequence[int],
        q_counts: Sequence[int],
        kv_lengths: Sequence[int],
        kv_starts: Sequence[int] | None = None,
        page_table: Tensor | np.ndarray | None = None,
        page_size: int = 0,
    ) -> Tensor:
        """Logits ``[len(logit_rows), vocab]`` of one step (see the module docstring);
        ``keys[l]`` / ``values[l]`` are float32 ``[rows, kv_heads, head_dim]``, written in
        place; ``kv_starts`` for a contiguous cache, ``page_table`` for a paged one."""
        s, b = self.spec, self.backend
        tok, pos, rows = _int64(tokens), _int64(positions), _int64(cache_rows)
        n = len(tok)
        if len(pos) != n or len(rows) != n:
            raise ShapeError(
                f"Decoder.step: {n} tokens, {len(pos)} positions, {len(rows)} cache rows"
            )
        # The caches are checked once per set of storages (a decode loop passes the same).
        seen = (tuple(map(id, map(_DATA, keys))), tuple(map(id, map(_DATA, values))))
        if seen != self._caches[0]:
            self._caches = (seen, self._check_caches(keys, values))
        cache_shape = self._caches[1]
        table = None
        width = 0
        if page_table is not None:
            raw = page_table.numpy() if isinstance(page_table, Tensor) else page_table
            pages = np.ascontiguousarray(raw, dtype=np.int64)
            if pages.ndim != 2:
                raise ShapeError(f"Decoder.step: the page table must be 2-D, found {pages.shape}")
            width = pages.shape[1]
            table = b.from_numpy(pages)
        elif kv_starts is None:
            raise ShapeError("Decoder.step: a contiguous cache needs kv_starts")
        batch = DecodeBatch(
            b.from_numpy(tok),
            b.from_numpy(pos),
            b.from_numpy(rows),
            n,
            tuple(map(_DATA, keys)),
            tuple(map(_DATA, values)),
            cache_shape,
            tuple(map(int, logit_rows)),
            tuple(map(int, q_starts)),
            tuple(map(int, q_counts)),
            () if kv_starts is None else tuple(map(int, kv_starts)),
            tuple(map(int, kv_lengths)),
            table,
            width,
            int(page_size),
        )
        data = b.decode_step(self._program, batch)
        for t in keys:
            t.version += 1
        for t in values:
            t.version += 1
        return Tensor._wrap(data, (len(batch.logit_rows), s.vocab), DType.float32, b)

    def _check_caches(
        self, keys: Sequence[Tensor], values: Sequence[Tensor]
    ) -> tuple[int, int, int]:
        s, b = self.spec, self.backend
        if len(keys) != len(s.layers) or len(values) != len(s.layers):
            raise ShapeError(
                f"Decoder.step: {len(keys)} key and {len(values)} value caches for "
                f"{len(s.layers)} layers"
            )
        cache_shape = keys[0].shape if keys else (0, s.kv_heads, s.head_dim)
        for what, t in (*(("key cache", k) for k in keys), *(("value cache", v) for v in values)):
            if t.backend != b or t.dtype is not DType.float32 or t.shape != cache_shape:
                raise ShapeError(
                    f"Decoder.step: every {what} must be float32 {cache_shape} on {b.name}, "
                    f"found {t.dtype.value} {t.shape} on {t.backend.name}"
                )
        if len(cache_shape) != 3 or tuple(cache_shape[1:]) != (s.kv_heads, s.head_dim):
            raise ShapeError(
                f"Decoder.step: caches must be [rows, {s.kv_heads}, {s.head_dim}], found "
                f"{cache_shape}"
            )
        return (int(cache_shape[0]), s.kv_heads, s.head_dim)


def _int64(v: Any) -> np.ndarray:
    if type(v) is np.ndarray and v.dtype == np.int64 and v.ndim == 1:
        return np.ascontiguousarray(v)
    return np.ascontiguousarray(v, dtype=np.int64).reshape(-1)


_DATA = operator.attrgetter("_data")


__all__ = [
    "FEED_FORWARDS",
    "DecodeBatch",
    "DecodeLayer",
    "DecodeLinear",
    "DecodeSpec",
    "Decoder",
    "DecoderLayer",
    "DecoderLinear",
    "DecoderNorm",
]
