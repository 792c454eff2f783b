"""The CPU backend: Rust kernels (riftco.tensor._native) over numpy-owned buffers.

Storage handles are C-contiguous numpy arrays shaped like their tensor. Every
kernel runs with the GIL released on the kernels' own thread pool.

bfloat16 storage is an ``ml_dtypes.bfloat16`` array; kernels see it as its uint16
bit patterns. Casts and the matrix product read those bits directly (the product
widens them exactly and accumulates in float32); elementwise ops and attention widen
their bfloat16 operands to float32, run the float32 kernel and, for elementwise
results, round once back to bfloat16.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.tensor import _native
from riftco.tensor.backend import BASE_DTYPES, Backend, Shape
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import CapabilityMissing, KernelError
from riftco.tensor.ops import fused, projected
from riftco.tensor.ops.decode import undecodable
from riftco.tensor.ops.inplace import clip_factor, clip_ready
from riftco.tensor.tensor import Tensor

BF16, F32, I64 = DType.bfloat16, DType.float32, DType.int64
_BF16_NUMPY = BF16.numpy
_F32_NUMPY = DType.float32.numpy


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint16)


def _widen(x: np.ndarray) -> np.ndarray:
    """float32 values of a bfloat16 array (exact)."""
    return _native.bf16_to_f32(x.view(np.uint16))


def _narrow(x: np.ndarray) -> np.ndarray:
    """The nearest bfloat16 values of a float32 array (ties to even)."""
    return _native.bf16_from_f32(x).view(_BF16_NUMPY)


def _widen3(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    # The op layer passes q, k and v all float32 or all bfloat16 (2-byte items).
    return (_widen(q), _widen(k), _widen(v)) if q.itemsize == 2 else (q, k, v)


class CpuBackend(Backend):
    name = "cpu"
    runs_on_host = True
    priority = 0  # the lowest: auto's fallback, never its choice
    dtypes = BASE_DTYPES | {BF16}

    def describe(self) -> str:
        return (
            f"host CPU, {_native.num_threads()} kernel threads, {_native.cpu_isa()} kernels, "
            f"native build {_native.BUILD_ID}"
        )

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def to_numpy(self, x: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        view = x.view()
        view.flags.writeable = False
        return view

    def reshape(self, x: np.ndarray, shape: Shape, new_shape: Shape) -> np.ndarray:
        return x.reshape(new_shape)

    def assign(self, dst: np.ndarray, src: np.ndarray, shape: Shape, dtype: DType) -> None:
        np.copyto(dst, src, casting="no")

    def astype(self, x: np.ndarray, shape: Shape, src: DType, dst: DType) -> np.ndarray:
        if dst is BF16:
            return _narrow(x if src is DType.float32 else x.astype(_F32_NUMPY))
        if src is BF16:
            wide = _widen(x)
            return wide if dst is DType.float32 else wide.astype(dst.numpy)
        return x.astype(dst.numpy)

    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        if dtype is BF16:
            bits = _native.copy_strided(_bits(x), list(out_shape), list(strides), offset)
            return bits.view(_BF16_NUMPY)
        return _native.copy_strided(x, list(out_shape), list(strides), offset)

    def concat(self, xs: Sequence[np.ndarray], shapes, dtype, axis):
        if dtype is BF16:
            return _native.concat([_bits(x) for x in xs], axis).view(_BF16_NUMPY)
        return _native.concat(list(xs), axis)

    def unary(self, op, x, shape, dtype):
        if dtype is BF16:
            return _narrow(_native.unary(op, _widen(x)))
        return _native.unary(op, x)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        if dtype is BF16:
            return _narrow(_native.binary(op, _widen(a), _widen(b), out_shape))
        return _native.binary(op, a, b, out_shape)

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        if dtype is BF16:
            return _native.compare(op, _widen(a), _widen(b), out_shape)
        return _native.compare(op, a, b, out_shape)

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        if dtype is BF16:
            return _native.where(cond, _bits(a), _bits(b), out_shape).view(_BF16_NUMPY)
        return _native.where(cond, a, b, out_shape)

    def reduce(self, op, x, shape, dtype, axis):
        return _native.reduce(op, x, axis)

    def argmax(self, x, shape, dtype, axis):
        return _native.argmax(x, axis)

    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        return _product(a, b, transpose_a, transpose_b)

    def matmul_compute(self, a, a_shape, b, b_shape, transpose_a, transpose_b, compute):
        if compute is not BF16:
            raise CapabilityMissing(f"matmul_compute: no {compute.value} compute dtype on cpu")
        return _product(_narrow(a), _narrow(b), transpose_a, transpose_b)

    def linear(self, x, x_shape, w, w_shape, bias, compute=None):
        # The composition riftco-tensor's op layer runs elsewhere (the product, then
        # the add): the same bits, a float32 bias added where the product was written.
        if bias is None or bias.dtype == _F32_NUMPY:
            return self._linear_product(x, x_shape, w, w_shape, False, True, compute, bias)
        y = self._linear_product(x, x_shape, w, w_shape, False, True, compute)
        shape = (int(x_shape[0]), int(w_shape[0]))
        return self.binary("add", y, shape, bias, shape[1:], shape, DType.float32)

    def linear_backward(self, g, x, x_shape, w, w_shape, need_x, need_w, need_b, compute=None):
        shape = (int(x_shape[0]), int(w_shape[0]))
        gl = g
        if x.dtype != _F32_NUMPY:
            gl, compute = self.astype(g, shape, DType.float32, BF16), None
        dx = self._linear_product(gl, shape, w, w_shape, False, False, compute) if need_x else None
        dw = self._linear_product(gl, shape, x, x_shape, True, False, compute) if need_w else None
        db = self.reduce("sum", g, shape, DType.float32, 0) if need_b else None
        return dx, dw, db

    def _linear_product(self, a, a_shape, b, b_shape, transpose_a, transpose_b, compute, bias=None):
        # ``bias`` (float32, one per output column) is added to the product in place.
        if compute is BF16 and a.dtype == _F32_NUMPY:
            a, b = _narrow(a), _narrow(b)
        return _product(a, b, transpose_a, transpose_b, bias)

    def index_select(self, x, shape, dtype, axis, indices, count):
        if dtype is BF16:
            return _native.index_select(_bits(x), axis, indices).view(_BF16_NUMPY)
        return _native.index_select(x, axis, indices)

    def index_add(self, base, shape, axis, indices, src, src_shape):
        return _native.index_add(base, axis, indices, src)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        if dtype is BF16:
            return _native.gather(_bits(x), axis, indices).view(_BF16_NUMPY)
        return _native.gather(x, axis, indices)

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        return _native.scatter_add(base, axis, indices, src)

    def softmax(self, x, shape, causal, log):
        return _native.softmax(x, causal, log)

    def adam_update(
        self,
        params,
        grads,
        m,
        v,
        sizes,
        page_size,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        step,
        grad_scale,
    ):
        # The arrays carry their sizes; the kernel checks that they agree.
        return _native.adam_update(
            list(params),
            list(grads),
            [list(x) for x in m],
            [list(x) for x in v],
            page_size,
            list(lr),
            list(beta1),
            list(beta2),
            list(eps),
            list(weight_decay),
            decoupled,
            list(step),
            grad_scale,
        )

    def clipped_adam_update(
        self,
        params,
        grads,
        m,
        v,
        sizes,
        page_size,
        lr,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled,
        step,
        max_grad_norm,
        values,
    ):
        # Host memory: the sums and values are read where they are; the update is
        # adam_update's kernel with the scale the norm gives.
        sums = []
        for g, size in zip(grads, sizes, strict=True):
            flat = np.asarray(g).reshape(-1)[: int(size)]
            sums.append(float(_native.reduce("sum_squares", flat, 0)) if size else 0.0)
        read = [float(np.asarray(x).reshape(-1)[0]) for x in values]
        if not clip_ready(sums, read, lambda i: not np.asarray(grads[i]).any()):
            return sums, read, False, None
        scale = clip_factor(sums, max_grad_norm)
        bad = self.adam_update(
            params, grads, m, v, sizes, page_size, lr, beta1, beta2, eps, weight_decay,
            decoupled, step, scale,
        )  # fmt: skip
        return sums, read, bad is None, bad

    def layer_norm(self, x, shape, weight, bias, eps):
        return _native.layer_norm(x, weight, bias, eps)

    def layer_norm_backward(self, dy, x, shape, weight, mean, rstd, with_bias):
        return _native.layer_norm_backward(dy, x, weight, mean, rstd, with_bias)

    def add_layer_norm(self, x, r, shape, weight, bias, eps):
        # The composition riftco-tensor's op layer runs elsewhere: the same bits.
        s = self.binary("add", x, shape, r, shape, shape, DType.float32)
        return (s, *self.layer_norm(s, shape, weight, bias, eps))

    def add_layer_norm_backward(self, dy, ds, x, shape, weight, mean, rstd, with_bias):
        # The composition riftco-tensor's op layer runs elsewhere: the same bits.
        dx, dw, db = self.layer_norm_backward(dy, x, shape, weight, mean, rstd, with_bias)
        return self.binary("add", ds, shape, dx, shape, shape, DType.float32), dw, db

    def rms_norm(self, x, shape, weight, eps):
        return _native.rms_norm(x, weight, eps)

    def rms_norm_backward(self, dy, x, shape, weight, rstd):
        return _native.rms_norm_backward(dy, x, weight, rstd)

    def activation_backward(self, op, x, dy, shape):
        return _native.activation_backward(op, x, dy)

    def cross_entropy(self, logits, shape, targets, ignore_index):
        return _native.cross_entropy(logits, targets, ignore_index)

    def cross_entropy_backward(self, logits, shape, targets, lse, grad, ignore_index):
        return _native.cross_entropy_backward(logits, targets, lse, grad, ignore_index)

    def cross_entropy_mean(self, logits, shape, targets, ignore_index):
        # The composition riftco-tensor's op layer runs elsewhere: the same bits.
        x, t = self._tensor(logits, shape, F32), self._tensor(targets, shape[:1], I64)
        loss, lse, scale = fused.composed_cross_entropy_mean(x, t, ignore_index)
        return loss._data, lse._data, scale._data

    def cross_entropy_mean_backward(self, logits, shape, targets, lse, grad, scale, ignore_index):
        rows = shape[:1]
        return fused.composed_cross_entropy_mean_backward(
            self._tensor(grad, (), F32), self._tensor(logits, shape, F32),
            self._tensor(targets, rows, I64), self._tensor(lse, rows, F32),
            self._tensor(scale, (), F32), ignore_index,
        )._data  # fmt: skip

    def rotary(self, x, shape, positions, theta, inverse):
        return _native.rotary(x, positions, theta, inverse)

    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        q, k, v = _widen3(q, k, v)
        return _native.attention(q, k, v, scale, causal, window)

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        q, k, v = _widen3(q, k, v)
        return _native.attention_backward(dout, q, k, v, probs, scale, causal, window)

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        q, k, v = _widen3(q, k, v)
        return _native.flash_attention(q, k, v, scale, causal, window)

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        q, k, v = _widen3(q, k, v)
        return _native.flash_attention_backward(
            dout, q, k, v, out, row_max, row_sum, scale, causal, window
        )

    def flash_attention_compute(self, q, k, v, q_shape, kv_shape, scale, causal, window, compute):
        # The permission not taken: the float32 products, the reference's bits.
        return self.flash_attention(q, k, v, q_shape, kv_shape, scale, causal, window)

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
        return self.flash_attention_backward(
            dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
        )

    def projected_attention(
        self, x, x_shape, ws, w_shapes, bs, batch, heads, kv_heads, head_dim, scale, causal,
        window, compute,
    ):  # fmt: skip
        # The composition riftco-tensor's op layer runs elsewhere, on this backend's
        # ops: the same bits; saved are its stacked weights and q, k and v.
        shape = (batch, int(x_shape[0]) // batch, heads, kv_heads, head_dim)
        x2 = self._tensor(x, x_shape, DType.float32)
        wt = [self._tensor(w, s, DType.float32) for w, s in zip(ws, w_shapes)]
        bt = (
            None
            if bs is None
            else [self._tensor(b, (s[0],), DType.float32) for b, s in zip(bs, w_shapes)]
        )
        out, stats, w, _, q, k, v = projected.composed_forward(
            x2, wt, bt, shape, _projected_options(scale, causal, window, compute), None, 0.0
        )
        row_max, row_sum = stats
        return out._data, row_max._data, row_sum._data, (w._data, q._data, k._data, v._data)

    def projected_attention_backward(
        self, dout, x, x_shape, ws, w_shapes, has_bias, saved, out, row_max, row_sum, batch,
        heads, kv_heads, head_dim, scale, causal, window, need_x, compute,
    ):  # fmt: skip
        steps = int(x_shape[0]) // batch
        shape = (batch, steps, heads, kv_heads, head_dim)
        low = DType.float32 if compute is None else DType(compute)
        f32 = DType.float32
        w, q, k, v = saved
        total = sum(int(s[0]) for s in w_shapes)
        dx, dws, dbs = projected.composed_backward(
            self._tensor(dout, (batch, steps, heads * head_dim), f32),
            self._tensor(x, x_shape, f32),
            [self._tensor(wi, s, f32) for wi, s in zip(ws, w_shapes)],
            has_bias,
            shape,
            _projected_options(scale, causal, window, compute),
            None,
            0.0,
            self._tensor(out, (batch, steps, heads, head_dim), f32),
            tuple(self._tensor(r, (batch, heads, steps), f32) for r in (row_max, row_sum)),
            self._tensor(w, (total, int(x_shape[1])), f32),
            True,
            (
                self._tensor(q, (batch, steps, heads, head_dim), low),
                self._tensor(k, (batch, steps, kv_heads, head_dim), low),
                self._tensor(v, (batch, steps, kv_heads, head_dim), low),
            ),
            need_x,
        )
        return (
            None if dx is None else dx._data,
            [d._data for d in dws],
            None if dbs is None else [d._data for d in dbs],
        )

    def _tensor(self, data, shape, dtype):
        return Tensor._wrap(data, tuple(int(n) for n in shape), dtype, self)

    def attention_varlen(
        self, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths, scale, window
    ):
        return _native.attention_varlen(
            q,
            k,
            v,
            list(q_starts),
            list(q_counts),
            list(kv_starts),
            list(kv_lengths),
            scale,
            window,
        )

    def write_rows(self, dst, shape, dtype, rows, src):
        if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
            raise KernelError(f"write_rows: rows {rows.tolist()} out of range for {shape[0]} rows")
        dst[rows] = src

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
        return _native.paged_attention(
            q,
            k_pages,
            v_pages,
            page_table,
            list(q_starts),
            list(q_counts),
            list(kv_lengths),
            scale,
            window,
        )

    def nf4_dequantize(self, codes, absmax, group_range, offset, w_shape, block_size):
        rows, cols = w_shape
        return _native.nf4_dequantize(codes, absmax, group_range, offset, rows, cols, block_size)

    def nf4_linear(self, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
        rows, cols = w_shape
        return _native.nf4_linear(
            x, codes, absmax, group_range, offset, rows, cols, block_size, bias
        )

    def nf4_linear_backward(
        self, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
    ):
        rows, cols = w_shape
        return _native.nf4_linear_backward(
            dy, codes, absmax, group_range, offset, rows, cols, block_size
        )

    def block_dequantize(self, data, format, w_shape):
        rows, cols = w_shape
        return _native.block_dequantize(data, format, rows, cols)

    def block_linear(self, x, x_shape, data, format, w_shape, bias):
        rows, cols = w_shape
        return _native.block_linear(x, data, format, rows, cols, bias)

    def decode_program(self, spec):
        # The native program reads the lowered spec by field name; what it does not
        # decode (a role, a feed-forward kind, a topology flag) is refused here, typed,
        # so the model decodes op by op.
        norms, linears, feed_forwards, topology = _native.decode_features()
        unknown = undecodable(
            spec, norms=norms, linears=linears, feed_forwards=feed_forwards, topology=topology
        )
        if unknown:
            raise CapabilityMissing(
                f"the cpu backend's whole-step decoder does not decode {', '.join(unknown)}"
            )
        return _native.DecodeProgram(spec)

    def decode_step(self, program, batch):
        return program.step(
            batch.tokens,
            batch.positions,
            batch.cache_rows,
            list(batch.keys),
            list(batch.values),
            list(batch.logit_rows),
            list(batch.q_starts),
            list(batch.q_counts),
            list(batch.kv_starts),
            list(batch.kv_lengths),
            batch.page_table,
            batch.page_size,
        )


def _product(a, b, transpose_a, transpose_b, bias=None):
    """The native product of two float32 or two bfloat16 handles (2-byte items go to
    the kernel as their bit patterns, which it widens exactly and accumulates in
    float32), with ``bias`` added to its rows in place."""
    if a.itemsize == 2:
        a, b = _bits(a), _bits(b)
    return _native.matmul(a, b, transpose_a, transpose_b, bias)


def create_backend() -> CpuBackend:
    """Entry-point factory for ``cpu``."""
    return CpuBackend()


def _projected_options(scale, causal, window, compute):
    """riftco-tensor's attention keywords of a projected attention call (flash)."""
    return {
        "causal": bool(causal),
        "window": int(window),
        "method": "flash",
        "scale": float(scale),
        "compute": None if compute is None else DType(compute),
    }
