"""Self-attention through its stacked query, key and value projections (API 1.13).

Forward, three products write one stacked float32 matrix ``y [B*T, Hq + 2 Hkv]``
(each weight's cuBLASLt product with its bias epilogue writes its own columns: no
weight or bias is concatenated), and attention reads its heads straight out of it:
on the cuBLAS route one ``swap_heads`` launch moves q, k and v heads first from their
columns, rounding them to bfloat16 on the way when computing in bfloat16 (the bits
of rounding the stacked product once and narrowing the parts out: no ``convert``
and no copies). Backward, the attention's last launch writes dq, dk and dv into the
columns of one stacked gradient ``gy``, which the products read in place: ``dx`` as
three products accumulating into one result (``beta = 1``), each ``dw_i`` from its
own columns (float32: with the bias gradient in the product's epilogue,
``BGRADB``), and in bfloat16 compute the three bias gradients one column reduction
over ``gy`` (``reduce_cols_parts_f32``, the tiled reduction's order per column).

Grouped-query heads, a window or scores past the cuBLAS route's bound keep the row
kernels, whose q, k and v are narrowed out of ``y`` by one ``swap_heads`` launch (a
copy, rounded when computing in bfloat16)."""

from __future__ import annotations

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError, CudaError
from riftco.backends.cuda.ops import base
from riftco.backends.cuda.ops.launch import Launcher, kernel
from riftco.tensor.plugin import DType

_REDUCE_COLS_PARTS = kernel("reduce", "reduce_cols_parts_f32")
F32 = "float32"


class ProjectedOps:
    """``projected_attention`` and ``projected_attention_backward``."""

    kernels: Launcher
    device: _native.Device

    def _projected_dims(self, x, x_shape, ws, w_shapes, bs, batch, heads, kv_heads, head_dim):
        rows, d = int(x_shape[0]), int(x_shape[1])
        sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        if len(ws) != 3 or [tuple(s) for s in w_shapes] != [(n, d) for n in sizes]:
            raise CudaError(
                f"projected_attention: expected weights [{sizes[0]}, {d}], [{sizes[1]}, {d}] "
                f"and [{sizes[2]}, {d}], found {[list(s) for s in w_shapes]}"
            )
        if rows != batch * (rows // max(batch, 1)) or batch <= 0:
            raise CudaError(f"projected_attention: {rows} rows are not {batch} sequences")
        tensors = [x, *ws, *(bs or [])]
        if any(t.dtype != F32 for t in tensors):
            raise CudaDTypeError(
                "projected_attention on cuda takes float32 x, weights and biases, found "
                + ", ".join(t.dtype for t in tensors)
            )
        offsets = [0, sizes[0], sizes[0] + sizes[1]]
        return rows, d, rows // batch, sizes, offsets, sum(sizes)

    def _stacked(self, x, rows, d, ws, bs, sizes, offsets, total, fast):
        """``y [rows, total]`` float32, each weight's product (and bias) in its columns."""
        y = self.kernels.alloc((rows, total), F32)
        compute = ("bfloat16",) if fast else ()
        for i, (w, size, offset) in enumerate(zip(ws, sizes, offsets)):
            if rows == 0 or size == 0:
                continue
            if d == 0:
                raise CudaError("projected_attention: a model width of 0")
            # Column-major y^T[total, rows]: the part's rows from `offset`, ld total.
            if bs is None:
                self.device.gemm(
                    F32, size, rows, d, (w, 0, d, 0, True), (x, 0, d, 0, False),
                    (y, offset, total, 0, False), 1, *compute,
                )  # fmt: skip
            else:
                self.device.gemm_epilogue(
                    F32, size, rows, d, (w, 0, d, True), (x, 0, d, False),
                    (y, offset, total, False), "bias", (bs[i], 0), *compute,
                )  # fmt: skip
        return y

    def _narrowed(self, y, rows, sizes, offsets, total, head_dim, to):
        """q, k and v ``[rows, size]`` copied out of ``y`` (one launch), as ``to``."""
        parts = [(y, F32, 1, size // head_dim, to) for size in sizes]
        return self._swap_heads(  # type: ignore[attr-defined]
            rows, head_dim, parts, [(offset, total) for offset in offsets]
        )

    def projected_attention(
        self, x, x_shape, ws, w_shapes, bs, batch, heads, kv_heads, head_dim, scale, causal,
        window, compute=None,
    ):  # fmt: skip
        rows, d, t, sizes, offsets, total = self._projected_dims(
            x, x_shape, ws, w_shapes, bs, batch, heads, kv_heads, head_dim
        )
        fast = compute is not None and DType(compute) is DType.bfloat16
        y = self._stacked(x, rows, d, ws, bs, sizes, offsets, total, fast)
        dtype = "bfloat16" if fast else F32
        q_shape, kv_shape = (batch, t, heads, head_dim), (batch, t, kv_heads, head_dim)
        dims = (batch, t, t, heads, kv_heads, head_dim)
        if fast and self._flash_route(batch, t, t, heads, kv_heads, head_dim, causal, window):  # type: ignore[attr-defined]
            out, _, row_max, row_sum = self._flash_forward(  # type: ignore[attr-defined]
                y, y, y, F32, dims, scale, causal, window, (total, offsets)
            )
            return out, row_max, row_sum, (y,)
        if self._gemm_route(batch, t, t, heads, kv_heads, window) and rows * heads * head_dim:  # type: ignore[attr-defined]
            out, _, row_max, row_sum = self._gemm_forward(  # type: ignore[attr-defined]
                y, y, y, dtype, batch, t, t, heads, head_dim, scale, causal, False,
                DType.bfloat16 if fast else None, (total, offsets),
            )  # fmt: skip
            return out, row_max, row_sum, (y,)
        q, k, v = self._narrowed(y, rows, sizes, offsets, total, head_dim, dtype)
        out, _, row_max, row_sum = self._forward(  # type: ignore[attr-defined]
            q, k, v, q_shape, kv_shape, scale, causal, window, False,
            DType.bfloat16 if fast else None,
        )  # fmt: skip
        return out, row_max, row_sum, (y,)

    def projected_attention_backward(
        self, dout, x, x_shape, ws, w_shapes, has_bias, saved, out, row_max, row_sum, batch, heads,
        kv_heads, head_dim, scale, causal, window, need_x, compute=None,
    ):  # fmt: skip
        rows, d, t, sizes, offsets, total = self._projected_dims(
            x, x_shape, ws, w_shapes, None, batch, heads, kv_heads, head_dim
        )
        (y,) = saved
        if dout.dtype != F32 or y.dtype != F32:
            raise CudaDTypeError(
                f"projected_attention_backward on cuda takes float32 dout and y, found "
                f"{dout.dtype} and {y.dtype}"
            )
        fast = compute is not None and DType(compute) is DType.bfloat16
        dtype = "bfloat16" if fast else F32
        low = DType.bfloat16 if fast else None
        q_shape, kv_shape = (batch, t, heads, head_dim), (batch, t, kv_heads, head_dim)
        gy = self.kernels.alloc((rows, total), F32)
        dims = (batch, t, t, heads, kv_heads, head_dim)
        if fast and self._flash_route(batch, t, t, heads, kv_heads, head_dim, causal, window):  # type: ignore[attr-defined]
            self._flash_backward(  # type: ignore[attr-defined]
                (dout, out, y, y, y, row_max, row_sum), F32, dims, scale, causal, window,
                (total, offsets), (gy, total, offsets),
            )  # fmt: skip
        elif self._gemm_route(batch, t, t, heads, kv_heads, window) and rows * heads * head_dim:  # type: ignore[attr-defined]
            self._gemm_backward(  # type: ignore[attr-defined]
                (dout, y, y, y, None, row_max, row_sum), dtype, (batch, t, t, heads, head_dim),
                scale, causal, low, (total, offsets), (gy, total, offsets),
            )  # fmt: skip
        else:
            q, k, v = self._narrowed(y, rows, sizes, offsets, total, head_dim, dtype)
            dq, dk, dv = self._backward(  # type: ignore[attr-defined]
                dout, q, k, v, None, row_max, row_sum, q_shape, kv_shape, scale, causal, window,
                low,
            )  # fmt: skip
            # Into gy's columns, one launch: [rows, 1, heads, Dh] parts moved in place.
            parts = [(g, F32, size // head_dim, 1, F32) for g, size in zip((dq, dk, dv), sizes)]
            self._swap_heads(rows, head_dim, parts, None, [(gy, o, total) for o in offsets])  # type: ignore[attr-defined]
        return self._projection_grads(
            gy, x, rows, d, ws, sizes, offsets, total, has_bias, need_x, fast
        )

    def _projection_grads(self, gy, x, rows, d, ws, sizes, offsets, total, has_bias, need_x, fast):
        compute = ("bfloat16",) if fast else ()
        dx = None
        if need_x:
            dx = self.kernels.alloc((rows, d), F32)
            # dx^T[d, rows] = sum_i w_i^T[d, size] gy_i^T[size, rows]: three products
            # into one result, each after the first adding to it (beta = 1).
            first = True
            for w, size, offset in zip(ws, sizes, offsets):
                if rows * d * size == 0:
                    continue
                self.device.gemm(
                    F32, d, rows, size, (w, 0, d, 0, False), (gy, offset, total, 0, False),
                    (dx, 0, d, 0, False), 1, "bfloat16" if fast else "float32", not first,
                )  # fmt: skip
                first = False
        dws, dbs = [], []
        for size, offset in zip(sizes, offsets):
            dw = self.kernels.alloc((size, d), F32)
            db = self.kernels.alloc((size,), F32) if has_bias and not fast else None
            if rows * d * size == 0:
                pass
            elif db is not None:
                # dw^T[d, size] = x^T gy_i; BGRADB sums op(B) = gy_i over the rows.
                self.device.gemm_epilogue(
                    F32, d, size, rows, (x, 0, d, False), (gy, offset, total, True),
                    (dw, 0, d, False), "bgradb", (db, 0),
                )  # fmt: skip
            else:
                self.device.gemm(
                    F32, d, size, rows, (x, 0, d, 0, False), (gy, offset, total, 0, True),
                    (dw, 0, d, 0, False), 1, *compute,
                )  # fmt: skip
            dws.append(dw)
            dbs.append(db)
        if has_bias and fast:
            dbs = self._bias_grads(gy, rows, sizes, offsets, total)
        return dx, dws, dbs if has_bias else None

    def _bias_grads(self, gy, rows, sizes, offsets, total):
        """The three bias gradients, each column summed as the tiled column reduction
        sums a part alone (one launch), or, for shapes that reduction does not take,
        each part copied out and reduced."""
        if (
            max(sizes) < base.TILED_OUTPUTS
            and rows >= base.TILED_AXIS
            and self.kernels.block >= 2 * base.COLS_TILE
        ):
            dbs = [self.kernels.alloc((size,), F32) for size in sizes]
            tiles = -(-total // base.COLS_TILE)
            self.kernels.rows(
                _REDUCE_COLS_PARTS, tiles, [gy, *dbs, rows, total, offsets[1], offsets[2]]
            )
            return dbs
        parts = self._swap_heads(  # type: ignore[attr-defined]
            rows, 1, [(gy, F32, 1, size, F32) for size in sizes], [(o, total) for o in offsets]
        )
        return [
            self.reduce("sum", p, (rows, size), DType.float32, 0)  # type: ignore[attr-defined]
            for p, size in zip(parts, sizes)
        ]


__all__ = ["ProjectedOps"]
