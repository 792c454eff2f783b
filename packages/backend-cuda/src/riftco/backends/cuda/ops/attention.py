"""Attention: materialized and flash (forward and backward), and the ragged
packed forms used by decoding (contiguous varlen and paged key/value caches).

The dense forms take q, k and v all float32 or all bfloat16 (a kernel per input
type, reading bfloat16 widened to float32); scores, statistics, outputs and
gradients are float32. Decoding attention reads float32 only.

With one key/value head per query head and no window, dense attention runs on
cuBLAS: q, k and v move heads first (``[B, H, T, Dh]``, one ``swap_heads`` launch
for all of them) so every product is one strided-batched call over all B * H
matrices -- forward the scores and the values, backward dp, the scores again, dv,
dq and dk -- between one softmax launch (scale, causal mask, statistics) forward,
one probabilities-and-score-gradient launch backward, and one launch moving the
results back to ``[B, T, H, Dh]``.

The scores of bfloat16 q and k are bfloat16 products; the rest multiply float32
operands (the probabilities, the output gradient, the scores' gradient, and q, k and
v widened exactly). ``flash_attention_compute`` and ``flash_attention_backward_compute``
(API 1.12, what riftco-nn's mixed precision calls) make every product a bfloat16 one,
as torch's bfloat16 attention does: v stays bfloat16, the output gradient is rounded
as it moves heads first, and the row passes write the probabilities and the scores'
gradient rounded to bfloat16 (to nearest, ties to even) into buffers of their own,
so those products read two bytes an element where they read four, and nothing is
widened. The row kernels keep float32 products either way."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError, CudaError
from riftco.backends.cuda.ops.launch import MAX_DIMS, Launcher, float32_only, kernel
from riftco.tensor.plugin import DType, Shape

#: The largest head dimension the kernels hold in shared memory.
MAX_HEAD_DIM = 256

#: The dense kernels (forward, dq, dk and dv) by the dtype of q, k and v.
_SUFFIX = {"float32": "f32", "bfloat16": "bf16"}
_FORWARD = {t: kernel("attention", f"attention_{s}") for t, s in _SUFFIX.items()}
_DQ = {t: kernel("attention", f"attention_dq_{s}") for t, s in _SUFFIX.items()}
_DKV = {t: kernel("attention", f"attention_dkv_{s}") for t, s in _SUFFIX.items()}
_RAGGED = kernel("attention", "attention_ragged_f32")
_SOFTMAX = kernel("attention", "attention_softmax_f32")
_DSCORES = kernel("attention", "attention_dscores_f32")
_SOFTMAX_DSCORES = kernel("attention", "attention_softmax_dscores_f32")
_SWAP_HEADS = kernel("layout", "swap_heads")
#: The tensors one ``swap_heads`` launch moves (the kernel's pointer pairs).
SWAP_PARTS = 6
#: The element kinds ``swap_heads`` reads and writes (the convert kernel's codes).
_KIND = {"float32": 0, "bfloat16": 4}
#: The cuBLAS route holds [B, H, T, S] float32 scores (twice in backward): used up to
#: this many score bytes, the row kernels beyond.
GEMM_ROUTE_BYTES = 8 << 30


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


def _bfloat16(compute) -> DType:
    if DType(compute) is not DType.bfloat16:
        raise CudaDTypeError(f"attention on cuda computes in bfloat16 only, found {compute}")
    return DType.bfloat16


def _slices(stacked):
    """``swap_heads`` sources reading q, k and v out of a stacked matrix ``(row,
    offsets)``, or None."""
    if stacked is None:
        return None
    row, offsets = stacked
    return [(offset, row) for offset in offsets]


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

    def _gemm_route(self, b: int, t: int, s: int, h: int, hkv: int, window: int) -> bool:
        """Attention through cuBLAS: one key/value head per query head, no window, the
        scores fit (``GEMM_ROUTE_BYTES``)."""
        return hkv == h and int(window) <= 0 and b * h * t * s * 4 <= GEMM_ROUTE_BYTES

    def _heads_gemm(self, dtype, a, a_dims, ta, bb, b_dims, tb, c, batch):
        """Row-major C = op(A) op(B) for ``batch`` contiguous matrices: A ``[batch, *a_dims]``
        and B ``[batch, *b_dims]``, each read transposed when ``ta`` / ``tb``, into C
        ``[batch, m, n]`` (cuBLAS's column-major C^T = op(B)^T op(A)^T)."""
        (ar, ac), (br, bc) = a_dims, b_dims
        m, k = (ac, ar) if ta else (ar, ac)
        n = br if tb else bc
        self.device.gemm(
            dtype,
            n,
            m,
            k,
            (bb, 0, bc, br * bc, bool(tb)),
            (a, 0, ac, ar * ac, bool(ta)),
            (c, 0, n, m * n, False),
            batch,
        )

    def _swap_heads(self, b: int, d: int, parts, sources=None, outputs=None) -> list:
        """``[B, X, Y, D]`` tensors copied to ``[B, Y, X, D]`` in one launch (up to
        ``SWAP_PARTS``): each part ``(buffer, dtype, x, y, to)`` read as ``dtype`` and
        written as ``to`` (float32 or bfloat16). ``sources[p]`` ``(offset, row)`` reads
        part ``p`` as a column slice of a wider matrix (its ``B * X`` rows ``row``
        elements apart, from element ``offset``); ``outputs[p]`` ``(buffer, offset,
        row)`` writes it into one (its ``B * Y`` rows). Returns the buffers written, in
        order (the new ones, or the given)."""
        n = len(parts)
        if not 0 < n <= SWAP_PARTS:
            raise CudaError(f"swap_heads moves one to six tensors a launch, given {n}")
        sources = list(sources or [None] * n)
        outputs = list(outputs or [None] * n)
        for p, (_, _, x, y, to) in enumerate(parts):
            if outputs[p] is None:
                outputs[p] = (self.kernels.alloc((b, y, x, d), to), 0, x * d)
            if sources[p] is None:
                sources[p] = (0, y * d)
        pointers: list = []
        for (buf, _, _, _, _), out in zip(parts, outputs):
            pointers += [buf, out[0]]
        pointers += [None, None] * (SWAP_PARTS - n)

        def table(values):
            return tuple(int(v) for v in values) + (1,) * (MAX_DIMS - n)

        total = sum(b * x * y * d for _, _, x, y, _ in parts)
        self.kernels.launch(
            _SWAP_HEADS,
            total,
            [
                *pointers,
                n,
                b,
                d,
                table(x for _, _, x, _, _ in parts),
                table(y for _, _, _, y, _ in parts),
                table(_KIND[dt] for _, dt, _, _, _ in parts),
                table(_KIND[to] for _, _, _, _, to in parts),
                table(offset for offset, _ in sources),
                table(row for _, row in sources),
                table(offset for _, offset, _ in outputs),
                table(row for _, _, row in outputs),
            ],
        )
        return [out[0] for out in outputs]

    def _scores(self, dtype, qh, kh, bh, t, s, dh):
        """``[B, H, T, S]`` float32 q k^T (unscaled) from heads-first q and k: one
        product batched over every batch row and head."""
        scores = self.kernels.alloc((bh, t, s), "float32")
        self._heads_gemm(dtype, qh, (t, dh), False, kh, (s, dh), True, scores, bh)
        return scores

    def _gemm_forward(
        self, q, k, v, dtype, b, t, s, h, dh, scale, causal, materialized, compute=None,
        stacked=None,
    ):  # fmt: skip
        """``stacked`` ``(row, offsets)``: q, k and v are float32 column slices of one
        matrix (the stacked projection, rows ``row`` elements apart, the parts from
        ``offsets``), rounded to ``dtype`` as they move heads first."""
        # Heads first ([B, H, T, Dh]), so each product is one strided-batched call over
        # B * H; v widened to float32 on the way (the probabilities are float32), or,
        # computing in bfloat16, kept bfloat16 for the rounded probabilities.
        low = compute is not None and dtype == "bfloat16" and not materialized
        v_to = dtype if low else "float32"
        src = "float32" if stacked else dtype
        qh, kh, vh = self._swap_heads(
            b,
            dh,
            [(q, src, t, h, dtype), (k, src, s, h, dtype), (v, src, s, h, v_to)],
            _slices(stacked),
        )
        bh = b * h
        scores = self._scores(dtype, qh, kh, bh, t, s, dh)
        rows = bh * t
        row_max = None if materialized else self.kernels.alloc((b, h, t), "float32")
        row_sum = None if materialized else self.kernels.alloc((b, h, t), "float32")
        probs = self.kernels.alloc((bh, t, s), "bfloat16") if low else scores
        self.kernels.rows(
            _SOFTMAX,
            rows,
            [scores, row_max, row_sum, probs if low else None]
            + [rows, t, s, float(scale), int(causal), 0],
        )
        del scores  # (bfloat16: the float32 scores go back to the pool here)
        out_h = self.kernels.alloc((b, h, t, dh), "float32")
        self._heads_gemm(v_to, probs, (t, s), False, vh, (s, dh), False, out_h, bh)
        (out,) = self._swap_heads(b, dh, [(out_h, "float32", h, t, "float32")])
        return out, (probs if materialized else None), row_max, row_sum

    def _gemm_backward(
        self, tensors, dtype, dims, scale, causal, compute=None, stacked=None, into=None
    ):
        """``tensors``: dout, q, k, v and the statistics (probs, or row max and sum);
        ``dims``: b, t, s, h, dh. ``stacked``: q, k and v are float32 slices of one
        matrix (see ``_gemm_forward``); ``into`` ``(buffer, row, offsets)``: the
        gradients are written into one such matrix (and returned as that buffer)."""
        dout, q, k, v, probs, row_max, row_sum = tensors
        b, t, s, h, dh = dims
        bh = b * h
        rows = bh * t
        f32 = "float32"
        recompute = probs is None
        if compute is not None and dtype == "bfloat16" and recompute:
            return self._gemm_backward_bf16(tensors, dims, scale, causal, stacked, into)
        if stacked and dtype != f32:
            raise CudaError(
                "attention from a stacked projection reads it as float32 or computes in bfloat16"
            )
        # Heads first, in one launch: dout, and q, k, v widened to float32 for the
        # products with float32 gradients; q and k as they are too when the scores are
        # recomputed (bfloat16 products, the forward's bits).
        parts = [
            (dout, f32, t, h, f32),
            (q, dtype, t, h, f32),
            (k, dtype, s, h, f32),
            (v, dtype, s, h, f32),
        ]
        if recompute and dtype != f32:
            parts += [(q, dtype, t, h, dtype), (k, dtype, s, h, dtype)]
        sources = None if stacked is None else [None, *_slices(stacked)]
        swapped = self._swap_heads(b, dh, parts, sources)
        dout_h, qf, kf, vf = swapped[:4]
        dp = self.kernels.alloc((b, h, t, s), f32)
        # dp = dout v^T
        self._heads_gemm(f32, dout_h, (t, dh), False, vf, (s, dh), True, dp, bh)
        if recompute:
            qh, kh = swapped[4:] if dtype != f32 else (qf, kf)
            probs = self._scores(dtype, qh, kh, bh, t, s, dh)
            # The probabilities from the statistics and the scores' gradient: one pass.
            self.kernels.rows(
                _SOFTMAX_DSCORES,
                rows,
                [probs, dp, row_max, row_sum, None, None, rows, t, s, float(scale), int(causal)],
            )
        else:
            self.kernels.rows(_DSCORES, rows, [probs, dp, rows, s, float(scale)])
        return self._gradients(f32, probs, dp, dout_h, qf, kf, dims, into)

    def _gemm_backward_bf16(self, tensors, dims, scale, causal, stacked=None, into=None):
        """The flash backward computing in bfloat16: dout rounded as it moves heads
        first, q, k and v moved as they are, and the row pass writing the
        probabilities and the scores' gradient as bfloat16, so every product reads
        two-byte operands (the roundings a float32 product in bfloat16 compute reads)."""
        dout, q, k, v, _, row_max, row_sum = tensors
        b, t, s, h, dh = dims
        bh, low = b * h, "bfloat16"
        src = "float32" if stacked else low
        dout_h, qh, kh, vh = self._swap_heads(
            b,
            dh,
            [(dout, "float32", t, h, low), (q, src, t, h, low), (k, src, s, h, low)]
            + [(v, src, s, h, low)],
            None if stacked is None else [None, *_slices(stacked)],
        )
        dp = self.kernels.alloc((b, h, t, s), "float32")
        self._heads_gemm(low, dout_h, (t, dh), False, vh, (s, dh), True, dp, bh)
        scores = self._scores(low, qh, kh, bh, t, s, dh)
        probs = self.kernels.alloc((bh, t, s), low)
        ds = self.kernels.alloc((bh, t, s), low)
        rows = bh * t
        self.kernels.rows(
            _SOFTMAX_DSCORES,
            rows,
            [scores, dp, row_max, row_sum, probs, ds, rows, t, s, float(scale), int(causal)],
        )
        del scores, dp  # back to the pool before the gradients' products
        return self._gradients(low, probs, ds, dout_h, qh, kh, dims, into)

    def _gradients(self, element, probs, ds, dout_h, qh, kh, dims, into=None):
        """dv = p^T dout, dq = ds k, dk = ds^T q (ds carries the scale), moved back to
        ``[B, T, H, Dh]`` in one launch (or into the columns ``into`` names)."""
        b, t, s, h, dh = dims
        bh, f32 = b * h, "float32"
        dq_h = self.kernels.alloc((b, h, t, dh), f32)
        dk_h = self.kernels.alloc((b, h, s, dh), f32)
        dv_h = self.kernels.alloc((b, h, s, dh), f32)
        self._heads_gemm(element, probs, (t, s), True, dout_h, (t, dh), False, dv_h, bh)
        self._heads_gemm(element, ds, (t, s), False, kh, (s, dh), False, dq_h, bh)
        self._heads_gemm(element, ds, (t, s), True, qh, (t, dh), False, dk_h, bh)
        outputs = None
        if into is not None:
            buffer, row, offsets = into
            outputs = [(buffer, offset, row) for offset in offsets]
        dq, dk, dv = self._swap_heads(
            b,
            dh,
            [(dq_h, f32, h, t, f32), (dk_h, f32, h, s, f32), (dv_h, f32, h, s, f32)],
            None,
            outputs,
        )
        return dq, dk, dv

    def _forward(
        self, q, k, v, q_shape, kv_shape, scale, causal, window, materialized: bool, compute=None
    ):
        b, t, s, h, hkv, dh = _dims(q_shape, kv_shape)
        dtype = _input_type("attention", q, k, v)
        if (
            compute is not None
            and dtype == "bfloat16"
            and not materialized
            and self._flash_route(b, t, s, h, hkv, dh, causal, window)  # type: ignore[attr-defined]
        ):
            return self._flash_forward(  # type: ignore[attr-defined]
                q, k, v, dtype, (b, t, s, h, hkv, dh), scale, causal, window
            )
        if self._gemm_route(b, t, s, h, hkv, window) and b * t * s * h * dh:
            return self._gemm_forward(
                q, k, v, dtype, b, t, s, h, dh, scale, causal, materialized, compute
            )
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

    def flash_attention_compute(self, q, k, v, q_shape, kv_shape, scale, causal, window, compute):
        # The cuBLAS route's p v product on the tensor cores; the row kernels (grouped
        # heads, a window) keep their float32 products, as the permission allows.
        out, _, row_max, row_sum = self._forward(
            q, k, v, q_shape, kv_shape, scale, causal, window, False, _bfloat16(compute)
        )
        return out, row_max, row_sum

    def _backward(
        self,
        dout,
        q,
        k,
        v,
        probs,
        row_max,
        row_sum,
        q_shape,
        kv_shape,
        scale,
        causal,
        window,
        compute=None,
    ):
        b, t, s, h, hkv, dh = _dims(q_shape, kv_shape)
        dtype = _input_type("attention_backward", q, k, v)
        float32_only("attention_backward", dout, probs, row_max, row_sum)
        if self._gemm_route(b, t, s, h, hkv, window) and b * t * s * h * dh:
            tensors = (dout, q, k, v, probs, row_max, row_sum)
            return self._gemm_backward(tensors, dtype, (b, t, s, h, dh), scale, causal, compute)
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

    def flash_attention_backward_compute(
        self,
        dout,
        q,
        k,
        v,
        out,
        row_max,
        row_sum,
        q_shape,
        kv_shape,
        scale,
        causal,
        window,
        compute,
    ):
        # dp, dv, dq and dk on the tensor cores (the output gradient, the probabilities
        # and the scores' gradient rounded as cuBLAS reads them): FlashAttention-2, or
        # the cuBLAS route.
        b, t, s, h, hkv, dh = _dims(q_shape, kv_shape)
        _bfloat16(compute)
        if _input_type("attention_backward", q, k, v) == "bfloat16" and self._flash_route(  # type: ignore[attr-defined]
            b, t, s, h, hkv, dh, causal, window
        ):
            float32_only("attention_backward", dout, out, row_max, row_sum)
            return self._flash_backward(  # type: ignore[attr-defined]
                (dout, out, q, k, v, row_max, row_sum), "bfloat16", (b, t, s, h, hkv, dh), scale,
                causal, window,
            )  # fmt: skip
        return self._backward(
            dout,
            q,
            k,
            v,
            None,
            row_max,
            row_sum,
            q_shape,
            kv_shape,
            scale,
            causal,
            window,
            _bfloat16(compute),
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
