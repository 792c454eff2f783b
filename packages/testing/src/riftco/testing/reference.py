"""The numpy reference backend: a second backend with its own storage type
(``ReferenceStorage``) whose every capability is a plain numpy formula, computed in
float64 where it matters. It keeps ``to()``, ``BackendMismatch`` and the shared op suite
honest without hardware, and is the formula other backends are compared with.

Its elementwise ops and reductions are riftco.tensor's op vocabularies themselves
(``riftco.tensor.plugin.UNARY`` and the rest); its other formulas are in
riftco.testing.reference_formulas. Discovery sees it only where a test patches it in
(``extra_entry_points(REFERENCE_ENTRY_POINT)``).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np

import riftco.tensor as rt
from riftco.tensor.ops.inplace import clip_factor, clip_ready
from riftco.tensor.plugin import (
    ACTIVATION_GRADIENTS,
    BASE_DTYPES,
    BINARY,
    COMPARISONS,
    ENTRY_POINT_GROUP,
    REDUCTIONS,
    UNARY,
    Backend,
    DType,
    KernelError,
)
from riftco.testing.reference_formulas import (
    ReferenceStorage,
    affine,
    attention_grads,
    attention_out,
    attention_probs,
    attention_scores,
    box,
    causal_mask,
    checked_indices,
    cross_entropy_targets,
    f32,
    logsumexp,
    nf4_weight,
    norm_backward,
    unbox,
)


class NumpyReferenceBackend(Backend):
    """Every capability as a plain numpy formula, computed in float64 where it matters."""

    name = "reference"
    runs_on_host = True
    # bfloat16 as ml_dtypes arrays: casts are ml_dtypes' (nearest, ties to even),
    # elementwise ops compute in float32 and round once, products and attention
    # widen to float64 like every float32 formula here.
    dtypes = BASE_DTYPES | {DType.bfloat16}

    def describe(self) -> str:
        return "numpy reference formulas (tests only)"

    def from_numpy(self, array):
        return ReferenceStorage(np.array(array, order="C", copy=True))

    def to_numpy(self, x, shape, dtype):
        return unbox(x).copy()

    def reshape(self, x, shape, new_shape):
        return ReferenceStorage(unbox(x).reshape(new_shape))

    def assign(self, dst, src, shape, dtype):
        unbox(dst)[...] = unbox(src)

    def astype(self, x, shape, src, dst):
        a = unbox(x)
        if DType.bfloat16 in (src, dst) and DType.float32 not in (src, dst):
            a = a.astype(np.float32)  # the interface's rule: through float32
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaNs, which stay NaN
            return box(a.astype(dst.numpy))

    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        flat = unbox(x).reshape(-1)
        index = np.full(out_shape, offset, dtype=np.int64)
        for d, (n, s) in enumerate(zip(out_shape, strides)):
            view = [1] * len(out_shape)
            view[d] = n
            index = index + (np.arange(n, dtype=np.int64) * s).reshape(view)
        return box(flat[index] if flat.size else np.zeros(out_shape, flat.dtype))

    def concat(self, xs, shapes, dtype, axis):
        return box(np.concatenate([unbox(x) for x in xs], axis=axis))

    def unary(self, op, x, shape, dtype):
        a = unbox(x)
        if dtype is DType.bfloat16:
            with np.errstate(all="ignore"):
                wide = UNARY[op](a.astype(np.float64)).astype(np.float32)
            return box(wide.astype(dtype.numpy))
        if dtype is DType.float32:
            with np.errstate(all="ignore"):
                return box(UNARY[op](a.astype(np.float64)).astype(np.float32))
        return box(UNARY[op](a))

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        x, y = unbox(a), unbox(b)
        if dtype is DType.bfloat16:
            x, y = x.astype(np.float32), y.astype(np.float32)
        with np.errstate(all="ignore"):
            out = BINARY[op](x, y)
        return box(np.broadcast_to(out, out_shape).astype(dtype.numpy))

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        x, y = unbox(a), unbox(b)
        if dtype is DType.bfloat16:
            x, y = x.astype(np.float32), y.astype(np.float32)
        return box(np.broadcast_to(COMPARISONS[op](x, y), out_shape))

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return box(np.broadcast_to(np.where(unbox(cond), unbox(a), unbox(b)), out_shape))

    def reduce(self, op, x, shape, dtype, axis):
        a = unbox(x)
        wide = a.astype(np.float64) if dtype is DType.float32 else a
        out = REDUCTIONS[op](wide, axis)
        return box(np.asarray(out).astype(dtype.numpy))

    def argmax(self, x, shape, dtype, axis):
        return box(np.argmax(unbox(x), axis=axis).astype(np.int64))

    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        x, y = unbox(a).astype(np.float64), unbox(b).astype(np.float64)
        if transpose_a:
            x = np.swapaxes(x, -1, -2)
        if transpose_b:
            y = np.swapaxes(y, -1, -2)
        return box((x @ y).astype(np.float32))

    def index_select(self, x, shape, dtype, axis, indices, count):
        return box(
            np.take(unbox(x), checked_indices("index_select", indices, shape[axis]), axis=axis)
        )

    def index_add(self, base, shape, axis, indices, src, src_shape):
        out = unbox(base).copy()
        moved_out = np.moveaxis(out, axis, 0)
        idx = checked_indices("index_add", indices, shape[axis])
        np.add.at(moved_out, idx, np.moveaxis(unbox(src), axis, 0))
        return box(out)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        idx = checked_indices("gather", indices, shape[axis])
        return box(np.take_along_axis(unbox(x), idx, axis=axis))

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        out = unbox(base).copy()
        idx = checked_indices("scatter_add", indices, shape[axis])
        grids: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        np.add.at(out, tuple(grids), unbox(src))
        return box(out)

    def softmax(self, x, shape, causal, log):
        a = unbox(x).astype(np.float64)
        if causal:
            a = np.where(causal_mask(shape[-2], shape[-1]), a, -np.inf)
        shifted = a - np.max(a, axis=-1, keepdims=True)
        if log:
            out = shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))
        else:
            e = np.exp(shifted)
            out = e / np.sum(e, axis=-1, keepdims=True)
        return box(out.astype(np.float32))

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
        f = np.float32
        hyper = list(zip(lr, beta1, beta2, eps, weight_decay, step, strict=True))
        candidates = []
        for i, (p, g, n) in enumerate(zip(params, grads, sizes, strict=True)):
            lr_i, b1, b2, eps_i, wd, t = hyper[i]
            bounds = list(range(0, n, page_size)) or [0]
            lengths = [min(page_size, n - b) for b in bounds]
            got = [unbox(x).size for x in m[i]], [unbox(x).size for x in v[i]]
            if unbox(p).size != n or unbox(g).size != n or got != (lengths, lengths) or t < 1:
                raise KernelError(
                    f"adam_update: parameter {i} of {n} elements, pages {got}, step {t}"
                )
            p0 = unbox(p).reshape(-1)
            g0: np.ndarray = unbox(g).reshape(-1) * f(grad_scale)
            m0 = np.concatenate([unbox(x) for x in m[i]])
            v0 = np.concatenate([unbox(x) for x in v[i]])
            with np.errstate(all="ignore"):
                if wd and not decoupled:
                    g0 = g0 + f(wd) * p0
                if wd and decoupled:
                    p0 = p0 * f(1.0 - lr_i * wd)
                m1 = m0 + f(1.0 - b1) * (g0 - m0)
                v1 = v0 * f(b2) + f(1.0 - b2) * g0 * g0
                denom = np.sqrt(v1) / f((1.0 - b2**t) ** 0.5) + f(eps_i)
                p1 = p0 + f(-(lr_i / (1.0 - b1**t))) * m1 / denom
            if not (np.isfinite(p1).all() and np.isfinite(m1).all() and np.isfinite(v1).all()):
                return i
            candidates.append((p1, np.split(m1, bounds[1:]), np.split(v1, bounds[1:])))
        for i, (p1, m_pages, v_pages) in enumerate(candidates):
            unbox(params[i])[...] = p1.reshape(unbox(params[i]).shape)
            for page, new in zip([*m[i], *v[i]], [*m_pages, *v_pages]):
                unbox(page)[...] = new
        return None

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
        wide = [unbox(g).reshape(-1).astype(np.float64) for g in grads]
        with np.errstate(over="ignore"):
            sums = [float(np.float32(np.sum(g * g))) for g in wide]
        read = [float(unbox(x).reshape(-1)[0]) for x in values]
        if not clip_ready(sums, read, lambda i: not wide[i].any()):
            return sums, read, False, None
        scale = clip_factor(sums, max_grad_norm)
        bad = self.adam_update(
            params, grads, m, v, sizes, page_size, lr, beta1, beta2, eps, weight_decay,
            decoupled, step, scale,
        )  # fmt: skip
        return sums, read, bad is None, bad

    # -- fused neural-network kernels, in float64 ------------------------------
    def layer_norm(self, x, shape, weight, bias, eps):
        a = unbox(x).astype(np.float64)
        mean = a.mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(((a - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
        y = affine((a - mean) * rstd, weight, bias)
        return box(f32(y)), box(f32(mean[..., 0])), box(f32(rstd[..., 0]))

    def layer_norm_backward(self, dy, x, shape, weight, mean, rstd, with_bias):
        return norm_backward(dy, x, weight, mean, rstd, with_bias)

    def rms_norm(self, x, shape, weight, eps):
        a = unbox(x).astype(np.float64)
        rstd = 1.0 / np.sqrt((a * a).mean(axis=-1, keepdims=True) + eps)
        return box(f32(affine(a * rstd, weight, None))), box(f32(rstd[..., 0]))

    def rms_norm_backward(self, dy, x, shape, weight, rstd):
        dx, dw, _ = norm_backward(dy, x, weight, None, rstd, False)
        return dx, dw

    def activation_backward(self, op, x, dy, shape):
        derivative = ACTIVATION_GRADIENTS.get(op)
        if derivative is None:
            raise KernelError(f"activation_backward: unknown activation {op!r}")
        grad = derivative(unbox(x).astype(np.float64))
        return box(f32(grad * unbox(dy)))

    def cross_entropy(self, logits, shape, targets, ignore_index):
        x, t = (
            unbox(logits).astype(np.float64),
            cross_entropy_targets(targets, shape[-1], ignore_index),
        )
        lse = logsumexp(x)
        kept = t != ignore_index
        picked = np.take_along_axis(x, np.where(kept, t, 0)[:, None], axis=-1)[:, 0]
        return box(f32(np.where(kept, lse - picked, 0.0))), box(f32(lse))

    def cross_entropy_backward(self, logits, shape, targets, lse, grad, ignore_index):
        x, t = (
            unbox(logits).astype(np.float64),
            cross_entropy_targets(targets, shape[-1], ignore_index),
        )
        kept = t != ignore_index
        d = np.exp(x - unbox(lse).astype(np.float64)[:, None])
        d[np.arange(len(t))[kept], t[kept]] -= 1.0
        return box(f32(d * np.where(kept, unbox(grad), 0.0)[:, None]))

    def rotary(self, x, shape, positions, theta, inverse):
        a, pos = unbox(x).astype(np.float64), unbox(positions)
        if (pos < 0).any():
            raise KernelError("rotary: negative position")
        half = shape[-1] // 2
        inv_freq = 1.0 / np.float32(theta) ** (np.arange(half, dtype=np.float32) * 2 / shape[-1])
        angle = (pos.astype(np.float32)[..., None] * inv_freq.astype(np.float32)).astype(np.float64)
        cos, sin = np.cos(angle)[..., None, :], np.sin(angle)[..., None, :] * (-1 if inverse else 1)
        x1, x2 = a[..., :half], a[..., half:]
        return box(f32(np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)))

    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        probs, _, _ = attention_probs(q, k, q_shape, kv_shape, scale, causal, window)
        return box(f32(attention_out(probs, v, q_shape))), box(f32(probs))

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        return attention_grads(unbox(probs).astype(np.float64), dout, q, k, v, scale)

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        probs, row_max, row_sum = attention_probs(q, k, q_shape, kv_shape, scale, causal, window)
        out = attention_out(probs, v, q_shape)
        return box(f32(out)), box(f32(row_max)), box(f32(row_sum))

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        scores, mask = attention_scores(q, k, scale, causal, window)
        m, sm = unbox(row_max).astype(np.float64), unbox(row_sum).astype(np.float64)
        probs = np.where(mask, np.exp(scores - m[..., None]) / sm[..., None], 0.0)
        return attention_grads(probs, dout, q, k, v, scale)

    def attention_varlen(
        self, q, k, v, q_shape, kv_shape, q_starts, q_counts, kv_starts, kv_lengths, scale, window
    ):
        covered = 0
        for start, count in sorted(zip(q_starts, q_counts)):
            if start != covered:
                raise KernelError("attention_varlen: segments must cover the query rows once")
            covered += count
        if covered != q_shape[0]:
            raise KernelError("attention_varlen: segments must cover the query rows once")
        out = np.zeros(q_shape, np.float32)
        for qs, qn, ks, kn in zip(q_starts, q_counts, kv_starts, kv_lengths, strict=True):
            if qn > kn or ks + kn > kv_shape[0]:
                raise KernelError(f"attention_varlen: segment ({qs}, {qn}, {ks}, {kn}) is invalid")
            seg_q = box(unbox(q)[qs : qs + qn][None])
            seg_k, seg_v = box(unbox(k)[ks : ks + kn][None]), box(unbox(v)[ks : ks + kn][None])
            probs, _, _ = attention_probs(
                seg_q, seg_k, (1, qn, *q_shape[1:]), (1, kn, *kv_shape[1:]), scale, True, window
            )
            out[qs : qs + qn] = attention_out(probs, seg_v, (1, qn, *q_shape[1:]))[0]
        return box(out)

    def write_rows(self, dst, shape, dtype, rows, src):
        unbox(dst)[checked_indices("write_rows", rows, shape[0])] = unbox(src)

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
        # Gather each sequence's pages into contiguous keys, then the varlen formula.
        table, page_size = unbox(page_table), pages_shape[1]
        keys: list[np.ndarray] = []
        values: list[np.ndarray] = []
        kv_starts: list[int] = []
        for j, length in enumerate(kv_lengths):
            used = -(-length // page_size)
            if used > table_shape[1]:
                raise KernelError(f"paged_attention: sequence {j} needs {used} pages")
            pages = checked_indices("paged_attention", box(table[j, :used]), pages_shape[0])
            kv_starts.append(sum(len(k) for k in keys))
            keys.append(unbox(k_pages)[pages].reshape(-1, *pages_shape[2:])[:length])
            values.append(unbox(v_pages)[pages].reshape(-1, *pages_shape[2:])[:length])
        k = np.concatenate(keys) if keys else np.zeros((0, *pages_shape[2:]), np.float32)
        v = np.concatenate(values) if values else k
        return self.attention_varlen(
            q,
            box(k),
            box(v),
            q_shape,
            k.shape,
            q_starts,
            q_counts,
            kv_starts,
            kv_lengths,
            scale,
            window,
        )

    def nf4_dequantize(self, codes, absmax, group_range, offset, w_shape, block_size):
        return box(nf4_weight(codes, absmax, group_range, offset, w_shape, block_size))

    def nf4_linear(self, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
        w = nf4_weight(codes, absmax, group_range, offset, w_shape, block_size)
        y = unbox(x) @ w.T
        return box((y if bias is None else y + unbox(bias)).astype(np.float32))

    def nf4_linear_backward(
        self, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
    ):
        w = nf4_weight(codes, absmax, group_range, offset, w_shape, block_size)
        return box((unbox(dy) @ w).astype(np.float32))

    def block_dequantize(self, data, format, w_shape):
        return box(rt.dequantize_block_array(unbox(data), format, w_shape))

    def block_linear(self, x, x_shape, data, format, w_shape, bias):
        rows, cols = w_shape
        flat = unbox(x).reshape(-1, cols)
        y = rt.block_linear_reference(flat, unbox(data), format, w_shape)
        if bias is not None:
            y = y + unbox(bias)
        return box(y.astype(np.float32).reshape(*x_shape[:-1], rows))


def create_reference_backend() -> NumpyReferenceBackend:
    return NumpyReferenceBackend()


REFERENCE_ENTRY_POINT = EntryPoint(
    name="reference",
    value="riftco.testing.reference:create_reference_backend",
    group=ENTRY_POINT_GROUP,
)

__all__ = [
    "REFERENCE_ENTRY_POINT",
    "NumpyReferenceBackend",
    "ReferenceStorage",
    "create_reference_backend",
]
