"""Attention: materialized and flash (forward and backward), and the ragged
packed forms used by decoding (contiguous varlen and paged key/value caches).

The dense forms take q, k and v all float32 or all bfloat16 (a kernel per input
type, reading bfloat16 widened to float32); scores, statistics, outputs and
gradients are float32. Decoding attention reads float32 only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError, CudaError
from riftco.backends.cuda.ops.launch import Launcher, float32_only, kernel
from riftco.tensor.plugin import Shape

#: The largest head dimension the kernels hold in shared memory.
MAX_HEAD_DIM = 256

#: The dense kernels (forward, dq, dk and dv) by the dtype of q, k and v.
_SUFFIX = {"float32": "f32", "bfloat16": "bf16"}
_FORWARD = {t: kernel("attention", f"attention_{s}") for t, s in _SUFFIX.items()}
_DQ = {t: kernel("attention", f"attention_dq_{s}") for t, s in _SUFFIX.items()}
_DKV = {t: kernel("attention", f"attention_dkv_{s}") for t, s in _SUFFIX.items()}
_RAGGED = kernel("attention", "attention_ragged_f32")


def _dims(q_shape: Shape, kv_shape: Shape) -> tuple[int, int, int, int, int, int]:
    if len(q_shape) != 4 or len(kv_shape) != 4:
        raise CudaError(
            f"attention: expected q [B, T, H, Dh] and k, v [B, S, Hkv, Dh], found "
            f"{list(q_shape)} and {list(kv_shape)}"
        )
    b, t, h, dh = (int(x) for x in q_shape)
    s, hkv = int(kv_shape[1]), int(kv_shape[2])
    if dh > MAX_HEAD_DIM:
        raise CudaError(
            f"attention on cuda takes a head dimension up to {MAX_HEAD_DIM}, found {dh}"
        )
    return b, t, s, h, hkv, dh


def _input_type(op: str, q, k, v) -> str:
    """The one dtype of q, k and v: float32 or bfloat16."""
    types = (q.dtype, k.dtype, v.dtype)
    if types[0] not in _SUFFIX or len(set(types)) != 1:
        raise CudaDTypeError(
            f"{op} on cuda takes q, k and v all float32 or all bfloat16, found {', '.join(types)}"
        )
    return types[0]


class AttentionOps:
    kernels: Launcher
    device: _native.Device

    def _forward(self, q, k, v, q_shape, kv_shape, scale, causal, window, materialized: bool):
        b, t, s, h, hkv, dh = _dims(q_shape, kv_shape)
        dtype = _input_type("attention", q, k, v)
        out = self.kernels.alloc(q_shape, "float32")
        probs = self.kernels.alloc((b, h, t, s), "float32") if materialized else None
        row_max = None if materialized else self.kernels.alloc((b, h, t), "float32")
        row_sum = None if materialized else self.kernels.alloc((b, h, t), "float32")
        self.kernels.rows(
            _FORWARD[dtype],
            b * h * t,
            [
                q,
                k,
                v,
                out,
                probs,
                row_max,
                row_sum,
                b,
                t,
                s,
                h,
                hkv,
                dh,
                float(scale),
                int(causal),
                int(window),
            ],
            tiled=True,
        )
        return out, probs, row_max, row_sum

    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        out, probs, _, _ = self._forward(q, k, v, q_shape, kv_shape, scale, causal, window, True)
        return out, probs

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        out, _, row_max, row_sum = self._forward(
            q, k, v, q_shape, kv_shape, scale, causal, window, False
        )
        return out, row_max, row_sum

    def _backward(
        self, dout, q, k, v, probs, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        b, t, s, h, hkv, dh = _dims(q_shape, kv_shape)
        dtype = _input_type("attention_backward", q, k, v)
        float32_only("attention_backward", dout, probs, row_max, row_sum)
        dq = self.kernels.alloc(q_shape, "float32")
        dk = self.kernels.alloc(kv_shape, "float32")
        dv = self.kernels.alloc(kv_shape, "float32")
        delta = self.kernels.alloc((b, h, t), "float32")
        common = [b, t, s, h, hkv, dh, float(scale), int(causal), int(window)]
        self.kernels.rows(
            _DQ[dtype],
            b * h * t,
            [dout, q, k, v, probs, row_max, row_sum, dq, delta, *common],
            tiled=True,
        )
        self.kernels.rows(
            _DKV[dtype],
            b * hkv * s,
            [dout, q, k, v, probs, row_max, row_sum, delta, dk, dv, *common],
            tiled=True,
        )
        return dq, dk, dv

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        return self._backward(
            dout, q, k, v, probs, None, None, q_shape, kv_shape, scale, causal, window
        )

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        return self._backward(
            dout, q, k, v, None, row_max, row_sum, q_shape, kv_shape, scale, causal, window
        )

    def _ragged(
        self,
        q,
        q_shape: Shape,
        k,
        v,
        hkv: int,
        meta: np.ndarray,
        table,
        table_cols: int,
        page_size: int,
        pages: int,
        scale: float,
        window: int,
    ):
        if len(q_shape) != 3:
            raise CudaError(f"attention: expected q [N, H, Dh], found {list(q_shape)}")
        n, h, dh = (int(x) for x in q_shape)
        if dh > MAX_HEAD_DIM:
            raise CudaError(
                f"attention on cuda takes a head dimension up to {MAX_HEAD_DIM}, found {dh}"
            )
        out = self.kernels.alloc(q_shape, "float32")
        if n == 0:
            return out
        flag = self.kernels.flag() if table is not None else None
        self.kernels.rows(
            _RAGGED,
            n * h,
            [
                q,
                k,
                v,
                out,
                self.kernels.upload_i64(meta),
                table,
                table_cols,
                page_size,
                pages,
                n,
                h,
                hkv,
                dh,
                float(scale),
                int(window),
                flag,
            ],
            tiled=True,
        )
        if flag is not None:
            self.kernels.check_index(flag, table, "paged_attention", pages)
        return out

    def attention_varlen(
        self, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths, scale, window
    ):
        float32_only("attention_varlen", q, k, v)
        if len(kv_shape) != 3:
            raise CudaError(f"attention_varlen: expected k, v [M, Hkv, Dh], found {list(kv_shape)}")
        meta = _meta(int(q_shape[0]), q_starts, q_counts, kv_lengths, kv_starts, int(kv_shape[0]))
        return self._ragged(q, q_shape, k, v, int(kv_shape[1]), meta, None, 0, 1, 0, scale, window)

    def paged_attention(
        self,
        q,
        q_shape,
        k_pages,
        v_pages,
        pages_shape,
        page_table,
        table_shape,
        q_starts,
        q_counts,
        kv_lengths,
        scale,
        window,
    ):
        float32_only("paged_attention", q, k_pages, v_pages)
        pages, page_size, hkv = (int(x) for x in pages_shape[:3])
        meta = _meta(
            int(q_shape[0]), q_starts, q_counts, kv_lengths, None, page_size * int(table_shape[1])
        )
        return self._ragged(
            q,
            q_shape,
            k_pages,
            v_pages,
            hkv,
            meta,
            page_table,
            int(table_shape[1]),
            page_size,
            pages,
            scale,
            window,
        )


def _meta(
    n: int,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_lengths: Sequence[int],
    kv_starts: Sequence[int] | None,
    kv_rows: int,
) -> np.ndarray:
    """Per query row: (sequence, first key row, key count, position). The query rows
    must be covered once, and each sequence's keys exist and outnumber its queries."""
    if not len(q_starts) == len(q_counts) == len(kv_lengths) or (
        kv_starts is not None and len(kv_starts) != len(q_starts)
    ):
        raise CudaError("attention: one start, count and length per sequence")
    meta = np.zeros((n, 4), dtype=np.int64)
    covered = np.zeros(n, dtype=np.int64)
    for j, (start, rows, length) in enumerate(zip(q_starts, q_counts, kv_lengths)):
        rows, length, start = int(rows), int(length), int(start)
        first = int(kv_starts[j]) if kv_starts is not None else 0
        if (
            rows < 0
            or start < 0
            or start + rows > n
            or rows > length
            or first < 0
            or first + length > kv_rows
        ):
            raise CudaError(
                f"attention: sequence {j} (queries {start}:+{rows}, keys {first}:+{length}) does "
                f"not fit {n} query rows and {kv_rows} key rows"
            )
        covered[start : start + rows] += 1
        local = np.arange(rows, dtype=np.int64)
        block = meta[int(start) : int(start) + rows]
        block[:, 0] = j
        block[:, 1] = first
        block[:, 2] = length
        block[:, 3] = length - rows + local
    if (covered != 1).any():
        row = int(np.flatnonzero(covered != 1)[0])
        raise CudaError(f"attention: query row {row} belongs to {covered[row]} sequences, not one")
    return meta


__all__ = ["MAX_HEAD_DIM", "AttentionOps"]
