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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from riftco.tensor.backend import Backend, Storage
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops.blockquant import BlockWeight
from riftco.tensor.ops.quantized import NF4Weight
from riftco.tensor.tensor import WRITES, Tensor

#: Feed-forward kinds and the roles of their linears.
FEED_FORWARDS: dict[str, tuple[str, ...]] = {
    "gelu": ("expand", "project"),
    "gelu_tanh": ("expand", "project"),
    "swiglu": ("gate", "up", "down"),
}
#: The roles of a layer's norms and attention linears.
NORM_ROLES = ("attention", "feed_forward")
ATTENTION_ROLES = ("query", "key", "value", "output")


@dataclass(frozen=True)
class DecodeLinear:
    """``y = x @ W^T (+ bias)``, ``W [rows, cols]`` (``shape``). ``format`` ``f32``:
    ``arrays`` is ``(weight,)``; ``q8_0`` / ``q4_0`` / ``f16``: ``(data,)`` (uint8 block
    rows); ``nf4``: ``(codes, absmax)`` or ``(codes, absmax, group_range)`` with its
    ``block_size`` and ``offset``. Tensors in a description, storage handles once lowered
    (`of` makes one from a weight)."""

    format: str
    arrays: tuple[Any, ...]
    shape: tuple[int, int]
    bias: Any = None
    block_size: int = 0
    offset: float = 0.0

    @classmethod
    def of(
        cls, weight: Tensor | BlockWeight | NF4Weight, bias: Tensor | None = None
    ) -> DecodeLinear:
        """A float32 Tensor ``[rows, cols]``, a `BlockWeight` or an `NF4Weight`, read in
        place, and an optional float32 bias ``[rows]``."""
        shape = (int(weight.shape[0]), int(weight.shape[1]))
        if isinstance(weight, BlockWeight):
            return cls(weight.format, (weight.data,), shape, bias)
        if isinstance(weight, NF4Weight):
            arrays: tuple[Tensor, ...] = (weight.codes, weight.absmax)
            if weight.group_range is not None:
                arrays += (weight.group_range,)
            offset = float(np.float32(weight.offset))
            return cls("nf4", arrays, shape, bias, int(weight.block_size), offset)
        return cls("f32", (weight,), shape, bias)


@dataclass(frozen=True)
class DecodeNorm:
    """A norm's weight and (layer norm) bias, float32 ``[d_model]``, either may be None."""

    weight: Any = None
    bias: Any = None


@dataclass(frozen=True)
class DecodeLayer:
    """One block: its norms by role (``attention``, ``feed_forward``), its linears by
    role (``query``, ``key``, ``value``, ``output`` and the feed-forward's, FEED_FORWARDS)
    and the feed-forward ``kind``. A topology feature adds roles; a backend refuses a
    role it does not know (CapabilityMissing), never ignores it."""

    norms: Mapping[str, DecodeNorm]
    linears: Mapping[str, DecodeLinear]
    feed_forward: str


@dataclass(frozen=True)
class DecodeSpec:
    """A model for whole-step decoding, as riftco-nn describes it: sizes, topology and
    tensors. ``norm`` is ``layer`` or ``rms``; ``rope_theta`` None means learned
    positions (``position_embedding [context, d_model]``), else rotary positions with
    that base; ``scale`` None is ``1/sqrt(head_dim)``; ``topology`` holds the flags of
    features beyond these (a backend refuses one it does not know). `Decoder` fills in
    ``d_model``, ``vocab``, ``context`` and ``scale`` and hands the backend the same spec
    over storage handles (``Backend.decode_program``)."""

    heads: int
    kv_heads: int
    head_dim: int
    norm: str
    eps: float
    token_embedding: Any
    layers: tuple[DecodeLayer, ...]
    final_norm: DecodeNorm
    head: DecodeLinear
    position_embedding: Any = None
    rope_theta: float | None = None
    window: int = 0
    scale: float | None = None
    topology: Mapping[str, bool | int | float | str] = field(default_factory=dict)
    d_model: int = 0
    vocab: int = 0
    context: int = 0


class DecodeBatch(NamedTuple):
    """One step for ``Backend.decode_step``: int64 ``tokens``, ``positions`` and
    ``cache_rows`` ``[N]`` (storage), every layer's ``keys`` / ``values`` cache (storage,
    written in place), ``logit_rows``, and per sequence its query rows
    (``q_starts``, ``q_counts``) and keys: ``kv_starts`` / ``kv_lengths`` in a contiguous
    cache, or its first ``kv_lengths`` positions through ``page_table`` (int64 storage
    ``[S, table_width]``) over pages of ``page_size``. A backend whose
    ``decode_host_indices`` is true gets ``tokens``, ``positions``, ``cache_rows`` and
    ``page_table`` as host numpy int64 arrays instead (nothing uploaded for it)."""

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


class _Check:
    """Every tensor of a description: float32, the expected shape, on the backend; each is
    replaced by its storage handle (the lowered spec the backend compiles)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def tensor(self, what: str, t: Any, shape: tuple[int, ...] | None, dtype: DType) -> Storage:
        if not isinstance(t, Tensor) or t.dtype is not dtype or (shape and t.shape != shape):
            want = f"{dtype.value} {shape}" if shape else dtype.value
            found = f"{t.dtype.value} {t.shape}" if isinstance(t, Tensor) else type(t).__name__
            raise ShapeError(f"Decoder: {what} must be {want}, found {found}")
        if t.backend != self.backend:
            raise ShapeError(
                f"Decoder: {what} is on {t.backend.name}, the embedding on {self.backend.name}"
            )
        return t._data

    def f32(self, what: str, t: Tensor | None, shape: tuple[int, ...] | None) -> Storage | None:
        return None if t is None else self.tensor(what, t, shape, DType.float32)

    def norm(self, what: str, n: DecodeNorm, kind: str, d: int | None) -> DecodeNorm:
        if kind == "rms" and n.bias is not None:
            raise ShapeError(f"Decoder: {what} is an RMS norm and takes no bias")
        shape = None if d is None else (d,)
        return DecodeNorm(
            self.f32(f"{what}.weight", n.weight, shape), self.f32(f"{what}.bias", n.bias, shape)
        )

    def linear(self, what: str, lin: DecodeLinear, shape: tuple[int, int] | None) -> DecodeLinear:
        if shape is not None and tuple(lin.shape) != shape:
            raise ShapeError(f"Decoder: {what} must be {list(shape)}, found {list(lin.shape)}")
        rows, cols = lin.shape
        f32, u8 = DType.float32, DType.uint8
        dtypes: tuple[DType, ...] = (u8,)  # llama.cpp block rows
        if lin.format == "f32":
            dtypes = (f32,)
        elif lin.format == "nf4":  # codes, scales (uint8 when double-quantized), ranges
            dtypes = (u8, f32) if len(lin.arrays) == 2 else (u8, u8, f32)
        if len(lin.arrays) != len(dtypes):
            raise ShapeError(
                f"Decoder: {what} is a {lin.format} linear of {len(lin.arrays)} arrays"
            )
        first = (rows, cols) if lin.format == "f32" else None
        arrays = tuple(
            self.tensor(what, a, first if i == 0 else None, dt)
            for i, (a, dt) in enumerate(zip(lin.arrays, dtypes, strict=True))
        )
        bias = self.f32(f"{what}.bias", lin.bias, (rows,))
        return DecodeLinear(
            lin.format, arrays, (rows, cols), bias, int(lin.block_size), float(lin.offset)
        )


def _layer_shapes(spec: DecodeSpec, layer: DecodeLayer, d: int) -> dict[str, tuple[int, int]]:
    qw, kvw = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    shapes = {"query": (qw, d), "key": (kvw, d), "value": (kvw, d), "output": (d, qw)}
    roles = FEED_FORWARDS[layer.feed_forward]
    hidden = layer.linears[roles[0]].shape[0] if roles[0] in layer.linears else 0
    for role in roles:
        shapes[role] = (d, hidden) if role == roles[-1] else (hidden, d)
    return shapes


def lower(spec: DecodeSpec, backend: Backend) -> DecodeSpec:
    """Check every shape and placement of ``spec`` and give the same spec over storage
    handles, with ``d_model``, ``vocab``, ``context`` and ``scale`` filled in."""
    check = _Check(backend)
    if not isinstance(spec.token_embedding, Tensor) or spec.token_embedding.ndim != 2:
        raise ShapeError("Decoder: token_embedding must be a float32 Tensor [vocab, d_model]")
    vocab, d = spec.token_embedding.shape
    heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads or head_dim <= 0:
        raise ShapeError(f"Decoder: {heads} heads over {kv_heads} key/value heads of {head_dim}")
    if spec.norm not in ("layer", "rms"):
        raise ShapeError(f"Decoder: norm must be 'layer' or 'rms', found {spec.norm!r}")
    if (spec.position_embedding is None) == (spec.rope_theta is None):
        raise ShapeError("Decoder: give exactly one of position_embedding (learned) and rope_theta")
    context = 0
    position = None
    if spec.position_embedding is not None:
        pe = spec.position_embedding
        context = int(pe.shape[0]) if isinstance(pe, Tensor) and pe.ndim == 2 else 0
        position = check.f32("position_embedding", pe, (context, d))
    layers = []
    for i, layer in enumerate(spec.layers):
        at = f"layers[{i}]"
        roles = FEED_FORWARDS.get(layer.feed_forward)
        if roles is None or not set(roles) <= set(layer.linears):
            raise ShapeError(
                f"Decoder: {at}.feed_forward must be one of {sorted(FEED_FORWARDS)} with "
                f"its linears, found {layer.feed_forward!r} with {sorted(layer.linears)}"
            )
        shapes = _layer_shapes(spec, layer, d)
        missing = [r for r in (*NORM_ROLES,) if r not in layer.norms]
        missing += [r for r in ATTENTION_ROLES if r not in layer.linears]
        if missing:
            raise ShapeError(f"Decoder: {at} has no {', '.join(missing)}")
        norms = {
            role: check.norm(f"{at}.{role}_norm", n, spec.norm, d if role in NORM_ROLES else None)
            for role, n in layer.norms.items()
        }
        linears = {
            role: check.linear(f"{at}.{role}", lin, shapes.get(role))
            for role, lin in layer.linears.items()
        }
        layers.append(DecodeLayer(norms, linears, layer.feed_forward))
    scale = float(1.0 / np.sqrt(head_dim) if spec.scale is None else spec.scale)
    return replace(
        spec,
        token_embedding=check.f32("token_embedding", spec.token_embedding, (vocab, d)),
        position_embedding=position,
        layers=tuple(layers),
        final_norm=check.norm("final_norm", spec.final_norm, spec.norm, d),
        head=check.linear("head", spec.head, (vocab, d)),
        scale=scale,
        window=int(spec.window),
        eps=float(spec.eps),
        rope_theta=None if spec.rope_theta is None else float(spec.rope_theta),
        topology=dict(spec.topology),
        d_model=int(d),
        vocab=int(vocab),
        context=context,
    )


class Decoder:
    """A `DecodeSpec` compiled for whole-step decoding on the backend of its token
    embedding (``Decoder.available(backend)`` says whether it can). Writing into the
    spec's tensors in place (``assign_``, ``adam_update_``: anything that bumps a
    tensor's ``version``) changes what the next step computes: a program may hold its
    own copy of a weight (a device upload, the CPU's tiled float32 layout), so the next
    step compiles the program again when a version moved. Replacing a tensor needs a new
    Decoder. A backend that cannot hold a part of the spec (a role or topology flag it
    does not know) raises CapabilityMissing."""

    def __init__(self, spec: DecodeSpec) -> None:
        if not isinstance(spec.token_embedding, Tensor):
            raise ShapeError("Decoder: token_embedding must be a float32 Tensor [vocab, d_model]")
        backend = spec.token_embedding.backend
        if not Decoder.available(backend):
            raise backend._missing("decode_step")
        self.spec = lower(spec, backend)
        self.backend = backend
        self._watched = tuple(_tensors(spec))
        self._versions = tuple(map(_VERSION, self._watched))
        # The in-place writes counted when the versions were last compared.
        self._writes = WRITES[0]
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
        # A backend with ``decode_host_indices`` takes the index arrays as host int64
        # arrays (it checks and uploads them itself, in one transfer).
        host = getattr(b, "decode_host_indices", False)
        if page_table is not None:
            raw = page_table.numpy() if isinstance(page_table, Tensor) else page_table
            pages = np.ascontiguousarray(raw, dtype=np.int64)
            if pages.ndim != 2:
                raise ShapeError(f"Decoder.step: the page table must be 2-D, found {pages.shape}")
            width = pages.shape[1]
            table = pages if host else b.from_numpy(pages)
        elif kv_starts is None:
            raise ShapeError("Decoder.step: a contiguous cache needs kv_starts")
        batch = DecodeBatch(
            tok if host else b.from_numpy(tok),
            pos if host else b.from_numpy(pos),
            rows if host else b.from_numpy(rows),
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
        if WRITES[0] != self._writes:  # some tensor was written in place: which?
            self._writes = WRITES[0]
            versions = tuple(map(_VERSION, self._watched))
            if versions != self._versions:
                self._program = b.decode_program(self.spec)
                self._versions = versions
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


def _tensors(node: Any) -> list[Tensor]:
    """Every Tensor of a description (fields, mappings and tuples), each once."""
    found: dict[int, Tensor] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Tensor):
            found.setdefault(id(n), n)
        elif isinstance(n, Mapping):
            stack.extend(n.values())
        elif isinstance(n, (tuple, list)):
            stack.extend(n)
        elif hasattr(n, "__dataclass_fields__"):
            stack.extend(getattr(n, f) for f in n.__dataclass_fields__)
    return list(found.values())


def undecodable(
    spec: DecodeSpec,
    *,
    norms: Collection[str],
    linears: Collection[str] | Mapping[str, Collection[str]],
    feed_forwards: Collection[str],
    topology: Collection[str] = (),
    formats: Collection[str] | None = None,
) -> list[str]:
    """What of ``spec`` a backend's whole-step decoder cannot decode, sorted and named
    for a ``CapabilityMissing`` message (empty when it decodes all of it).

    ``norms``, ``feed_forwards`` and ``topology`` are the norm roles, feed-forward
    kinds and topology flags it decodes; ``linears`` the linear roles, or per
    feed-forward kind the roles a layer of that kind may have; ``formats`` the weight
    formats of its linears and head (``None``: every format).
    """

    def roles(layer: DecodeLayer) -> Collection[str]:
        if isinstance(linears, Mapping):
            return linears.get(layer.feed_forward, ())
        return linears

    found = {f"topology flag {k!r}" for k in spec.topology if k not in topology}
    for layer in spec.layers:
        found |= {f"norm role {r!r}" for r in layer.norms if r not in norms}
        found |= {f"linear role {r!r}" for r in layer.linears if r not in roles(layer)}
        if layer.feed_forward not in feed_forwards:
            found.add(f"feed-forward {layer.feed_forward!r}")
        if formats is not None:
            found |= {
                f"{w.format} weights" for w in layer.linears.values() if w.format not in formats
            }
    if formats is not None and spec.head.format not in formats:
        found.add(f"{spec.head.format} weights")
    return sorted(found)


def _int64(v: Any) -> np.ndarray:
    if type(v) is np.ndarray and v.dtype == np.int64 and v.ndim == 1:
        return np.ascontiguousarray(v)
    return np.ascontiguousarray(v, dtype=np.int64).reshape(-1)


_DATA = operator.attrgetter("_data")
_VERSION = operator.attrgetter("version")


__all__ = [
    "ATTENTION_ROLES",
    "FEED_FORWARDS",
    "NORM_ROLES",
    "DecodeBatch",
    "DecodeLayer",
    "DecodeLinear",
    "DecodeNorm",
    "DecodeSpec",
    "Decoder",
    "lower",
    "undecodable",
]
