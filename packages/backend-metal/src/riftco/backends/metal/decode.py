"""Whole-step decoding (backend API 1.7 ``decode_program`` / ``decode_step``).

``decode_program`` builds a plan once: the model's float32 weights read in place, the
rotary frequencies uploaded, and activation buffers for a number of rows (grown by
doubling when a step has more). A step checks its tokens, positions, cache rows,
segments and page table on the host (where ``Decoder.step`` made them), packs them
into one int32 block and writes it with one upload into the plan's metadata buffer,
then records every kernel of the step into the pending batch: about ``8 + 9 L``
dispatches for ``L`` layers, submitted once, when the caller reads the logits (or
every 256 dispatches). Nothing is read back during the step; the returned logits
stay on the device (``argmax`` of them reads back only the token ids).

Weights other than float32 (llama.cpp blocks, NF4) are refused with
``CapabilityMissing``, so such a model decodes op by op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.backends.metal import fused
from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, f32bits, groups_for
from riftco.tensor.plugin import CapabilityMissing, DType, undecodable

_F32 = DType.float32
_I64 = DType.int64
#: The layer roles this plan decodes, per feed-forward kind.
_ROLES = {
    "gelu": {"query", "key", "value", "output", "expand", "project"},
    "gelu_tanh": {"query", "key", "value", "output", "expand", "project"},
    "swiglu": {"query", "key", "value", "output", "gate", "up", "down"},
}
_ACT = {"gelu": 0, "gelu_tanh": 1, "swiglu": 2}
_NORMS = {"attention", "feed_forward"}
MAX_HEAD_DIM = 256


def _refuse(spec: Any) -> None:
    unknown = undecodable(
        spec, norms=_NORMS, linears=_ROLES, feed_forwards=_ROLES, formats=("f32",)
    )
    if spec.head_dim > MAX_HEAD_DIM:
        unknown.append(f"head size {spec.head_dim}")
    if spec.rope_theta is not None and spec.head_dim % 2:
        unknown.append("odd rotary head size")
    if unknown:
        raise CapabilityMissing(
            f"the wgpu backends' whole-step decoder does not decode {', '.join(unknown)}"
        )


@dataclass
class Program:
    """A lowered ``DecodeSpec`` and the buffers of its steps."""

    spec: Any
    zero: Storage
    inv_freq: Storage | None
    capacity: int = 0
    buffers: dict[str, Storage] = field(default_factory=dict)
    meta: Storage | None = None
    meta_words: int = 0


def program(rt: Runtime, spec: Any) -> Program:
    _refuse(spec)
    zero = rt.upload(np.zeros(4, np.float32), _F32)
    inv = None
    if spec.rope_theta is not None:
        inv = rt.upload(fused._inverse_frequencies(float(spec.rope_theta), spec.head_dim), _F32)
    return Program(spec, zero, inv)


def _hidden(spec: Any) -> int:
    widths = [1]
    for layer in spec.layers:
        first = "gate" if layer.feed_forward == "swiglu" else "expand"
        widths.append(layer.linears[first].shape[0])
    return max(widths)


def _ensure(rt: Runtime, p: Program, n: int, meta_words: int) -> None:
    s = p.spec
    if n > p.capacity:
        cap = max(8, 1 << (n - 1).bit_length())
        d, qw, kvw = s.d_model, s.heads * s.head_dim, s.kv_heads * s.head_dim
        sizes = {
            "x": cap * d,
            "h": cap * d,
            "qkv": cap * (qw + 2 * kvw),
            "attn": cap * qw,
            "g": cap * _hidden(s),
            "u": cap * _hidden(s),
            "s1": cap,
            "s2": cap,
        }
        p.buffers = {k: rt.empty(max(v, 1), _F32) for k, v in sizes.items()}
        p.capacity = cap
    if meta_words > p.meta_words:
        words = max(64, 1 << (meta_words - 1).bit_length())
        p.meta = rt.empty(words, _I64)
        p.meta_words = words


def _host(rt: Runtime, x: Storage | np.ndarray) -> np.ndarray:
    """The step's int64 values: the host array ``Decoder.step`` hands this backend
    (``decode_host_indices``), or a host-made storage's values (read back only when the
    device wrote it)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x, dtype=np.int64).reshape(-1)
    known = x.host_values()
    return known if known is not None else rt.download(x).astype(np.int64)


def _segments(rt: Runtime, p: Program, batch: Any, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query row (key start or sequence, key count, query position), checked; and
    the page table (empty for a contiguous cache)."""
    n, seqs = batch.rows, len(batch.q_starts)
    if len(batch.q_counts) != seqs or len(batch.kv_lengths) != seqs:
        raise GpuError("decode: segment lists of different lengths")
    paged = batch.page_table is not None
    table = np.zeros(0, np.int64)
    if paged:
        ps, width = int(batch.page_size), int(batch.table_width)
        if ps <= 0 or rows % ps or width <= 0:
            raise GpuError(
                f"decode: a page table of width {width} for {seqs} sequences and pages of "
                f"{ps} over {rows} rows"
            )
        table = _host(rt, batch.page_table).reshape(-1)
        if table.size != seqs * width:
            raise GpuError(
                f"decode: a page table of {table.size} entries for {seqs} sequences of {width}"
            )
        grid = table.reshape(seqs, width)
        for j, length in enumerate(batch.kv_lengths):
            used = -(-int(length) // ps)
            if used > width:
                raise GpuError(
                    f"decode: sequence {j} has {length} keys, more than {width} pages of {ps} hold"
                )
            bad = np.flatnonzero((grid[j, :used] < 0) | (grid[j, :used] >= rows // ps))
            if bad.size:
                raise GpuError(
                    f"decode: page {int(grid[j, bad[0]])} (sequence {j}, entry {int(bad[0])}) "
                    f"is out of range for a pool of {rows // ps} pages"
                )
    elif len(batch.kv_starts) != seqs:
        raise GpuError("decode: segment lists of different lengths")
    segs = np.zeros((n, 3), np.int64)
    covered = np.zeros(n, bool)
    for j in range(seqs):
        start, count, length = (
            int(batch.q_starts[j]),
            int(batch.q_counts[j]),
            int(batch.kv_lengths[j]),
        )
        if start < 0 or count < 0 or start + count > n or count > length:
            raise GpuError(
                f"decode: sequence {j} (query rows {start}:+{count}, {length} keys) does not "
                f"fit {n} rows"
            )
        if covered[start : start + count].any():
            raise GpuError(f"decode: sequence {j} overlaps another sequence's query rows")
        covered[start : start + count] = True
        if paged:
            first = j
        else:
            first = int(batch.kv_starts[j])
            if first < 0 or first + length > rows:
                raise GpuError(
                    f"decode: sequence {j}'s keys {first}:+{length} exceed the cache's {rows} rows"
                )
        segs[start : start + count] = np.stack(
            [
                np.full(count, first),
                np.full(count, length),
                np.arange(length - count, length),
            ],
            axis=1,
        )
    if not covered.all():
        raise GpuError(f"decode: the sequences cover {int(covered.sum())} of {n} query rows")
    return segs.reshape(-1), table


def step(rt: Runtime, p: Program, batch: Any) -> Storage:
    s = p.spec
    n = int(batch.rows)
    if n <= 0:
        raise GpuError("decode: a step of no tokens")
    if len(batch.keys) != len(s.layers) or len(batch.values) != len(s.layers):
        raise GpuError(
            f"decode: {len(batch.keys)} key and {len(batch.values)} value caches for "
            f"{len(s.layers)} layers"
        )
    rows = int(batch.cache_shape[0])
    tokens, positions = _host(rt, batch.tokens), _host(rt, batch.positions)
    cache_rows = _host(rt, batch.cache_rows)
    if tokens.size != n or positions.size != n or cache_rows.size != n:
        raise GpuError(
            f"decode: {n} tokens with {positions.size} positions and {cache_rows.size} cache rows"
        )
    logit_rows = np.asarray(batch.logit_rows, np.int64)
    m = int(logit_rows.size)
    bad = np.flatnonzero((logit_rows < 0) | (logit_rows >= n))
    if bad.size:
        raise GpuError(f"decode: logits of row {int(logit_rows[bad[0]])} of a step of {n} tokens")
    bad = np.flatnonzero((tokens < 0) | (tokens >= s.vocab))
    if bad.size:
        i = int(bad[0])
        raise GpuError(
            f"decode: token {int(tokens[i])} (row {i}) is outside the vocabulary of {s.vocab}"
        )
    contexts = s.context if s.position_embedding is not None else (1 << 31) - 1
    bad = np.flatnonzero((positions < 0) | (positions >= contexts))
    if bad.size:
        i = int(bad[0])
        raise GpuError(
            f"decode: position {int(positions[i])} (row {i}) is outside the model's "
            f"{contexts} positions"
        )
    bad = np.flatnonzero((cache_rows < 0) | (cache_rows >= rows))
    if bad.size:
        raise GpuError(f"decode: cache row {int(cache_rows[bad[0]])} is outside the {rows} rows")
    segs, table = _segments(rt, p, batch, rows)
    # One block: tokens | positions | cache rows | logit rows | segments | page table.
    at_pos, at_rows, at_logits = n, 2 * n, 3 * n
    at_segs = 3 * n + m
    at_table = at_segs + segs.size
    block = np.concatenate([tokens, positions, cache_rows, logit_rows, segs, table])
    _ensure(rt, p, n, int(block.size))
    assert p.meta is not None
    rt.device.write(p.meta.buffer, 0, block.astype(np.int32).view(np.uint8))
    b = p.buffers
    x, h, qkv, attn, g, u = b["x"], b["h"], b["qkv"], b["attn"], b["g"], b["u"]
    d, hd = s.d_model, s.head_dim
    qw, kvw = s.heads * hd, s.kv_heads * hd
    stride = qw + 2 * kvw
    learned = s.position_embedding is not None
    pos_emb = s.position_embedding if learned else p.zero
    rt.run(
        rt.kernel("decode_embed"),
        [p.meta, s.token_embedding, pos_emb, x],
        [n, d, 0, at_pos, int(learned)],
        groups_for(n * d),
    )
    rms = s.norm == "rms"

    def norm(weights: Any, src: Storage, dst: Storage, count: int) -> None:
        w = weights.weight if weights.weight is not None else p.zero
        bias = weights.bias if weights.bias is not None else p.zero
        params = [
            count, d, f32bits(s.eps), int(rms), int(weights.weight is not None),
            int(weights.bias is not None),
        ]  # fmt: skip
        rt.run(
            rt.kernel("norm"), [src, w, bias, dst, b["s1"], b["s2"]], params, groups_for(count, 1)
        )

    def linear(lin: Any, src, src_stride, src_at, dst, dst_stride, dst_at, count, acc=False):
        out_rows, cols = lin.shape
        bias = lin.bias if lin.bias is not None else p.zero
        params = [
            count, out_rows, cols, src_stride, src_at, dst_stride, dst_at,
            int(lin.bias is not None), int(acc),
        ]  # fmt: skip
        gx = -(-out_rows // 64)
        groups = (gx, count, 1) if gx <= 65535 else (65535, count, -(-gx // 65535))
        rt.run(rt.kernel("decode_linear"), [src, lin.arrays[0], bias, dst], params, groups)

    attn_params = [
        n, s.heads, s.kv_heads, hd, f32bits(s.scale), max(int(s.window), 0),
        int(batch.page_table is not None), int(batch.page_size), int(batch.table_width),
        stride, at_segs, at_table,
    ]  # fmt: skip
    for layer, keys, values in zip(s.layers, batch.keys, batch.values, strict=True):
        lin = layer.linears
        norm(layer.norms["attention"], x, h, n)
        linear(lin["query"], h, d, 0, qkv, stride, 0, n)
        linear(lin["key"], h, d, 0, qkv, stride, qw, n)
        linear(lin["value"], h, d, 0, qkv, stride, qw + kvw, n)
        if p.inv_freq is not None:
            pairs = n * (s.heads + s.kv_heads) * (hd // 2)
            rt.run(
                rt.kernel("decode_rope"),
                [p.meta, p.inv_freq, qkv],
                [pairs, s.heads + s.kv_heads, hd // 2, stride, at_pos],
                groups_for(pairs),
            )
        keys.written()
        values.written()
        rt.run(
            rt.kernel("decode_kv"),
            [p.meta, qkv, keys, values],
            [n, kvw, stride, qw, at_rows],
            groups_for(n * kvw),
        )
        rt.run(
            rt.kernel("decode_attention"),
            [p.meta, p.meta, qkv, keys, values, attn],
            attn_params,
            groups_for(n * s.heads, 1),
        )
        linear(lin["output"], attn, qw, 0, x, d, 0, n, acc=True)
        norm(layer.norms["feed_forward"], x, h, n)
        if layer.feed_forward == "swiglu":
            hidden = lin["gate"].shape[0]
            linear(lin["gate"], h, d, 0, g, hidden, 0, n)
            linear(lin["up"], h, d, 0, u, hidden, 0, n)
            down = lin["down"]
        else:
            hidden = lin["expand"].shape[0]
            linear(lin["expand"], h, d, 0, g, hidden, 0, n)
            down = lin["project"]
        count = n * hidden
        rt.run(
            rt.kernel("decode_act"),
            [u, g],
            [count, _ACT[layer.feed_forward]],
            groups_for(count),
        )
        linear(down, g, hidden, 0, x, d, 0, n, acc=True)
    logits = rt.empty(m * s.vocab, _F32)
    if m:
        rt.run(rt.kernel("decode_rows"), [p.meta, x, h], [m, d, at_logits], groups_for(m * d))
        norm(s.final_norm, h, x, m)
        linear(s.head, x, d, 0, logits, s.vocab, 0, m)
    return logits
