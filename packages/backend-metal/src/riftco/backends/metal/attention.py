"""Attention: materialized and flash (forward and backward), packed ragged
sequences (varlen) and decoding over a paged key/value cache.

Kernels run one thread per (query row, head) with an online softmax, so no
``[T, S]`` block is ever held (the materialized variant then writes its
probabilities from the row statistics). Head sizes up to 256 are supported. On the
``tiled`` attention path the dense forward shares each tile of keys and values
among 64 query rows through workgroup memory (the same arithmetic per row).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, f32bits, groups_for
from riftco.tensor.plugin import DType

MAX_HEAD_DIM = 256
_F32 = DType.float32


def _params(
    threads, b, t, s, h, hkv, dh, scale, causal, window, page_size=0, max_pages=0, from_probs=False
):
    if dh > MAX_HEAD_DIM:
        raise GpuError(f"attention: head size {dh} exceeds {MAX_HEAD_DIM} on this backend")
    if hkv == 0 or h % hkv:
        raise GpuError(f"attention: {h} query heads are not a multiple of {hkv} key/value heads")
    return [
        threads, b, t, s, h, hkv, dh, f32bits(scale), int(causal), max(int(window), 0),
        page_size, max_pages, int(from_probs),
    ]  # fmt: skip


def _dims(q_shape, kv_shape):
    b, t, h, dh = (int(x) for x in q_shape)
    s, hkv = int(kv_shape[1]), int(kv_shape[2])
    return b, t, h, dh, s, hkv


#: Floats of one key (or value) tile in workgroup memory (2 x 7.75 KiB in all).
_TILE_FLOATS = 1984


def forward(rt: Runtime, q, k, v, q_shape, kv_shape, scale, causal, window):
    b, t, h, dh, s, hkv = _dims(q_shape, kv_shape)
    rows = b * t * h
    out = rt.empty(q.count, _F32)
    row_max, row_sum = rt.empty(rows, _F32), rt.empty(rows, _F32)
    params = _params(rows, b, t, s, h, hkv, dh, scale, causal, window)
    if rt.attention_path == "tiled" and rows and dh:
        keys = max(1, min(32, _TILE_FLOATS // dh))
        kernel = rt.kernel("attn_forward_tiled", KT=str(keys), TD=str(keys * dh))
        groups = (-(-t // 64), b * h, 1)
        rt.run(kernel, [q, k, v, out, row_max, row_sum], params, groups)
        return out, row_max, row_sum, params
    kernel = rt.kernel("attn_forward", MODE="0")
    rt.run(kernel, [q, k, v, q, q, out, row_max, row_sum], params, groups_for(rows, 64))
    return out, row_max, row_sum, params


def attention(rt: Runtime, q, k, v, q_shape, kv_shape, scale, causal, window):
    out, row_max, row_sum, params = forward(rt, q, k, v, q_shape, kv_shape, scale, causal, window)
    s = int(kv_shape[1])
    probs = rt.empty(row_max.count * s, _F32)
    buffers = [q, k, row_max, row_sum, probs]
    rt.run(rt.kernel("attn_probs"), buffers, params, groups_for(probs.count))
    return out, probs


def backward(
    rt: Runtime, dout, q, k, v, probs, row_max, row_sum, q_shape, kv_shape, scale, causal, window
):
    b, t, h, dh, s, hkv = _dims(q_shape, kv_shape)
    rows = b * t * h
    from_probs = probs is not None
    params = _params(rows, b, t, s, h, hkv, dh, scale, causal, window, from_probs=from_probs)
    dq, delta = rt.empty(q.count, _F32), rt.empty(rows, _F32)
    dk, dv = rt.empty(k.count, _F32), rt.empty(v.count, _F32)
    p = probs if from_probs else q
    mx = row_max if row_max is not None else q
    sm = row_sum if row_sum is not None else q
    buffers = [q, k, v, dout, p, mx, sm, dq, delta]
    tiled = rt.attention_path == "tiled" and rows > 0 and dh > 0 and s > 0
    if tiled:
        keys = max(1, min(32, _TILE_FLOATS // dh))
        tile = {"KT": str(keys), "TD": str(keys * dh)}
        rt.run(rt.kernel("attn_backward_q_tiled", **tile), buffers, params, (-(-t // 64), b * h, 1))
    else:
        rt.run(rt.kernel("attn_backward_q"), buffers, params, groups_for(rows, 64))
    buffers = [q, k, v, dout, p, mx, sm, delta, dk, dv]
    if tiled:
        groups = (-(-s // 64), b * hkv, 1)
        rt.run(rt.kernel("attn_backward_kv_tiled", **tile), buffers, params, groups)
    else:
        rt.run(rt.kernel("attn_backward_kv"), buffers, params, groups_for(b * s * hkv, 64))
    return dq, dk, dv


def _meta(q_starts, q_counts, first_of, kv_lengths, rows: int) -> np.ndarray:
    """(key start or sequence, key count, query position) of every packed query row."""
    meta = np.zeros((rows, 3), dtype=np.int64)
    covered = np.zeros(rows, dtype=bool)
    for j, (start, count, length) in enumerate(zip(q_starts, q_counts, kv_lengths, strict=True)):
        start, count, length = int(start), int(count), int(length)
        if start < 0 or count < 0 or start + count > rows or count > length:
            raise GpuError(
                f"attention: segment {j} (query rows {start}:+{count}, {length} keys) does not "
                f"fit {rows} query rows"
            )
        if covered[start : start + count].any():
            raise GpuError(f"attention: segment {j} overlaps another segment's query rows")
        covered[start : start + count] = True
        meta[start : start + count, 0] = first_of(j)
        meta[start : start + count, 1] = length
        meta[start : start + count, 2] = np.arange(length - count, length)
    if not covered.all():
        raise GpuError(f"attention: the segments cover {int(covered.sum())} of {rows} query rows")
    return meta.reshape(-1)


def varlen(
    rt: Runtime,
    q,
    k,
    v,
    q_shape,
    kv_shape,
    q_starts,
    q_counts,
    kv_starts,
    kv_lengths,
    scale,
    window,
):
    n, h, dh = (int(x) for x in q_shape)
    m, hkv = int(kv_shape[0]), int(kv_shape[1])
    for j, (start, length) in enumerate(zip(kv_starts, kv_lengths, strict=True)):
        if int(start) < 0 or int(length) < 0 or int(start) + int(length) > m:
            raise GpuError(f"attention_varlen: sequence {j} keys {start}:+{length} exceed {m} rows")
    meta = _meta(q_starts, q_counts, lambda j: int(kv_starts[j]), kv_lengths, n)
    return _packed(rt, q, k, v, n, h, hkv, dh, meta, None, 0, 0, scale, window, "1")


def paged(
    rt: Runtime,
    q,
    q_shape,
    k_pages,
    v_pages,
    pages_shape,
    page_table: Storage,
    table_shape,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_lengths: Sequence[int],
    scale,
    window,
):
    n, h, dh = (int(x) for x in q_shape)
    n_pages, page_size, hkv = (int(x) for x in pages_shape[:3])
    seqs, max_pages = int(table_shape[0]), int(table_shape[1])
    if page_size <= 0:
        raise GpuError("paged attention: page size 0")
    if len(kv_lengths) != seqs:
        raise GpuError(
            f"paged attention: {len(kv_lengths)} lengths for a table of {seqs} sequences"
        )
    table = rt.download(page_table).reshape(seqs, max_pages)
    for j, length in enumerate(kv_lengths):
        used = -(-int(length) // page_size)
        if used > max_pages:
            raise GpuError(
                f"paged attention: sequence {j} has {length} keys, more than {max_pages} pages "
                f"of {page_size} hold"
            )
        bad = [(c, int(p)) for c, p in enumerate(table[j, :used]) if not 0 <= p < n_pages]
        if bad:
            raise GpuError(
                f"paged attention: page {bad[0][1]} (sequence {j}, entry {bad[0][0]}) is out of "
                f"range for a pool of {n_pages} pages"
            )
    meta = _meta(q_starts, q_counts, lambda j: j, kv_lengths, n)
    return _packed(
        rt,
        q,
        k_pages,
        v_pages,
        n,
        h,
        hkv,
        dh,
        meta,
        page_table,
        page_size,
        max_pages,
        scale,
        window,
        "2",
    )


def _packed(rt, q, k, v, n, h, hkv, dh, meta, table, page_size, max_pages, scale, window, mode):
    rows = n * h
    meta_s = rt.upload(meta, DType.int64)
    out = rt.empty(q.count, _F32)
    scratch = rt.empty(max(rows, 1), _F32)
    scratch2 = rt.empty(max(rows, 1), _F32)
    if rt.attention_path == "tiled" and rows and dh:
        # A workgroup per (query row, head) over 64-key tiles (kernels/decode_attention).
        _params(rows, 1, 0, 0, h, hkv, dh, scale, True, window)  # the same refusals
        paged = int(table is not None)
        params = [
            n, h, hkv, dh, f32bits(scale), max(int(window), 0), paged, page_size, max_pages,
            h * dh, 0, 0,
        ]  # fmt: skip
        buffers = [meta_s, table if table is not None else meta_s, q, k, v, out]
        rt.run(rt.kernel("decode_attention"), buffers, params, groups_for(rows, 1))
        return out
    params = _params(rows, 1, 0, 0, h, hkv, dh, scale, True, window, page_size, max_pages)
    buffers = [q, k, v, meta_s, table if table is not None else meta_s, out, scratch, scratch2]
    rt.run(rt.kernel("attn_forward", MODE=mode), buffers, params, groups_for(rows, 64))
    return out
