"""Test support for riftco-tensor and every package built on it (imports pytest).

- ``NumpyReferenceBackend``: a second backend with its own storage type
  (``ReferenceStorage``) whose every capability is a plain numpy formula. It
  keeps ``to()``, ``BackendMismatch`` and the shared op suite honest without
  hardware, and is the numpy formula other backends are compared with.
- ``extra_entry_points``: register backends by patching the entry points,
  so discovery is tested without installing anything.
- ``backend``: a pytest fixture yielding every available backend (cpu, the
  reference backend, and any installed plugin); use it from a conftest.py with
  ``from riftco.testing.tensor import backend  # noqa: F401``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import EntryPoint
from typing import Any

import numpy as np
import pytest

from riftco.tensor import registry
from riftco.tensor.backend import BASE_DTYPES, Backend
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import KernelError
from riftco.tensor.ops.decode import ComposedDecode


class ReferenceStorage:
    """The reference backend's storage: a private numpy array in a box."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


def _a(x: ReferenceStorage) -> np.ndarray:
    if not isinstance(x, ReferenceStorage):
        raise TypeError(f"reference backend got a foreign storage handle {type(x).__name__}")
    return x.array


def _box(array) -> ReferenceStorage:
    return ReferenceStorage(np.asarray(array, order="C"))


_ERF = np.vectorize(math.erf, otypes=[np.float64])

UNARY: dict[str, Callable[..., np.ndarray]] = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "logical_not": np.logical_not,
}
BINARY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
COMPARE: dict[str, Callable[..., np.ndarray]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def _checked(op: str, indices: ReferenceStorage, n: int) -> np.ndarray:
    idx = _a(indices)
    bad = np.flatnonzero((idx < 0) | (idx >= n))
    if bad.size:
        pos = int(bad[0])
        raise KernelError(
            f"{op}: index {int(idx.reshape(-1)[pos])} at position {pos} is out of "
            f"range for an axis of size {n}"
        )
    return idx


def causal_mask(t: int, s: int) -> np.ndarray:
    """True where query q (of t) may see key k (of s): k <= q + s - t."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


class NumpyReferenceBackend(ComposedDecode, Backend):
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
        return _a(x).copy()

    def reshape(self, x, shape, new_shape):
        return ReferenceStorage(_a(x).reshape(new_shape))

    def assign(self, dst, src, shape, dtype):
        _a(dst)[...] = _a(src)

    def astype(self, x, shape, src, dst):
        a = _a(x)
        if DType.bfloat16 in (src, dst) and DType.float32 not in (src, dst):
            a = a.astype(np.float32)  # the interface's rule: through float32
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaNs, which stay NaN
            return _box(a.astype(dst.numpy))

    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        flat = _a(x).reshape(-1)
        index = np.full(out_shape, offset, dtype=np.int64)
        for d, (n, s) in enumerate(zip(out_shape, strides)):
            view = [1] * len(out_shape)
            view[d] = n
            index = index + (np.arange(n, dtype=np.int64) * s).reshape(view)
        return _box(flat[index] if flat.size else np.zeros(out_shape, flat.dtype))

    def concat(self, xs, shapes, dtype, axis):
        return _box(np.concatenate([_a(x) for x in xs], axis=axis))

    def unary(self, op, x, shape, dtype):
        a = _a(x)
        if dtype is DType.bfloat16:
            with np.errstate(all="ignore"):
                wide = UNARY[op](a.astype(np.float64)).astype(np.float32)
            return _box(wide.astype(dtype.numpy))
        if dtype is DType.float32:
            with np.errstate(all="ignore"):
                return _box(UNARY[op](a.astype(np.float64)).astype(np.float32))
        return _box(UNARY[op](a))

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        x, y = _a(a), _a(b)
        if dtype is DType.bfloat16:
            x, y = x.astype(np.float32), y.astype(np.float32)
        with np.errstate(all="ignore"):
            out = BINARY[op](x, y)
        return _box(np.broadcast_to(out, out_shape).astype(dtype.numpy))

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        x, y = _a(a), _a(b)
        if dtype is DType.bfloat16:
            x, y = x.astype(np.float32), y.astype(np.float32)
        return _box(np.broadcast_to(COMPARE[op](x, y), out_shape))

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return _box(np.broadcast_to(np.where(_a(cond), _a(a), _a(b)), out_shape))

    def reduce(self, op, x, shape, dtype, axis):
        a = _a(x)
        wide = a.astype(np.float64) if dtype is DType.float32 else a
        if op == "sum_squares":
            out = np.sum(wide * wide, axis=axis)
        else:
            reducers: dict[str, Callable[..., Any]] = {
                "sum": np.sum,
                "mean": np.mean,
                "max": np.max,
                "min": np.min,
            }
            out = reducers[op](wide, axis=axis)
        return _box(np.asarray(out).astype(dtype.numpy))

    def argmax(self, x, shape, dtype, axis):
        return _box(np.argmax(_a(x), axis=axis).astype(np.int64))

    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        x, y = _a(a).astype(np.float64), _a(b).astype(np.float64)
        if transpose_a:
            x = np.swapaxes(x, -1, -2)
        if transpose_b:
            y = np.swapaxes(y, -1, -2)
        return _box((x @ y).astype(np.float32))

    def index_select(self, x, shape, dtype, axis, indices, count):
        return _box(np.take(_a(x), _checked("index_select", indices, shape[axis]), axis=axis))

    def index_add(self, base, shape, axis, indices, src, src_shape):
        out = _a(base).copy()
        moved_out = np.moveaxis(out, axis, 0)
        idx = _checked("index_add", indices, shape[axis])
        np.add.at(moved_out, idx, np.moveaxis(_a(src), axis, 0))
        return _box(out)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        idx = _checked("gather", indices, shape[axis])
        return _box(np.take_along_axis(_a(x), idx, axis=axis))

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        out = _a(base).copy()
        idx = _checked("scatter_add", indices, shape[axis])
        grids: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        np.add.at(out, tuple(grids), _a(src))
        return _box(out)

    def softmax(self, x, shape, causal, log):
        a = _a(x).astype(np.float64)
        if causal:
            a = np.where(causal_mask(shape[-2], shape[-1]), a, -np.inf)
        shifted = a - np.max(a, axis=-1, keepdims=True)
        if log:
            out = shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))
        else:
            e = np.exp(shifted)
            out = e / np.sum(e, axis=-1, keepdims=True)
        return _box(out.astype(np.float32))

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
            got = [_a(x).size for x in m[i]], [_a(x).size for x in v[i]]
            if _a(p).size != n or _a(g).size != n or got != (lengths, lengths) or t < 1:
                raise KernelError(
                    f"adam_update: parameter {i} of {n} elements, pages {got}, step {t}"
                )
            p0 = _a(p).reshape(-1)
            g0: np.ndarray = _a(g).reshape(-1) * f(grad_scale)
            m0 = np.concatenate([_a(x) for x in m[i]])
            v0 = np.concatenate([_a(x) for x in v[i]])
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
            _a(params[i])[...] = p1.reshape(_a(params[i]).shape)
            for page, new in zip([*m[i], *v[i]], [*m_pages, *v_pages]):
                _a(page)[...] = new
        return None

    # -- fused neural-network kernels, in float64 ------------------------------
    def layer_norm(self, x, shape, weight, bias, eps):
        a = _a(x).astype(np.float64)
        mean = a.mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(((a - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
        y = _affine((a - mean) * rstd, weight, bias)
        return _box(_f32(y)), _box(_f32(mean[..., 0])), _box(_f32(rstd[..., 0]))

    def layer_norm_backward(self, dy, x, shape, weight, mean, rstd, with_bias):
        return _norm_backward(dy, x, weight, mean, rstd, with_bias)

    def rms_norm(self, x, shape, weight, eps):
        a = _a(x).astype(np.float64)
        rstd = 1.0 / np.sqrt((a * a).mean(axis=-1, keepdims=True) + eps)
        return _box(_f32(_affine(a * rstd, weight, None))), _box(_f32(rstd[..., 0]))

    def rms_norm_backward(self, dy, x, shape, weight, rstd):
        dx, dw, _ = _norm_backward(dy, x, weight, None, rstd, False)
        return dx, dw

    def activation_backward(self, op, x, dy, shape):
        a = _a(x).astype(np.float64)
        if op == "gelu":
            pdf = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
            grad = 0.5 * (1.0 + _ERF(a / math.sqrt(2.0))) + a * pdf
        elif op == "gelu_tanh":
            c = math.sqrt(2.0 / math.pi)
            t = np.tanh(c * (a + 0.044715 * a**3))
            grad = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * a * a)
        elif op == "silu":
            sig = 1.0 / (1.0 + np.exp(-a))
            grad = sig * (1.0 + a * (1.0 - sig))
        else:
            raise KernelError(f"activation_backward: unknown activation {op!r}")
        return _box(_f32(grad * _a(dy)))

    def cross_entropy(self, logits, shape, targets, ignore_index):
        x, t = _a(logits).astype(np.float64), _ce_targets(targets, shape[-1], ignore_index)
        lse = _logsumexp(x)
        kept = t != ignore_index
        picked = np.take_along_axis(x, np.where(kept, t, 0)[:, None], axis=-1)[:, 0]
        return _box(_f32(np.where(kept, lse - picked, 0.0))), _box(_f32(lse))

    def cross_entropy_backward(self, logits, shape, targets, lse, grad, ignore_index):
        x, t = _a(logits).astype(np.float64), _ce_targets(targets, shape[-1], ignore_index)
        kept = t != ignore_index
        d = np.exp(x - _a(lse).astype(np.float64)[:, None])
        d[np.arange(len(t))[kept], t[kept]] -= 1.0
        return _box(_f32(d * np.where(kept, _a(grad), 0.0)[:, None]))

    def rotary(self, x, shape, positions, theta, inverse):
        a, pos = _a(x).astype(np.float64), _a(positions)
        if (pos < 0).any():
            raise KernelError("rotary: negative position")
        half = shape[-1] // 2
        inv_freq = 1.0 / np.float32(theta) ** (np.arange(half, dtype=np.float32) * 2 / shape[-1])
        angle = (pos.astype(np.float32)[..., None] * inv_freq.astype(np.float32)).astype(np.float64)
        cos, sin = np.cos(angle)[..., None, :], np.sin(angle)[..., None, :] * (-1 if inverse else 1)
        x1, x2 = a[..., :half], a[..., half:]
        return _box(_f32(np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)))

    def attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        probs, _, _ = _attention_probs(q, k, q_shape, kv_shape, scale, causal, window)
        return _box(_f32(_attention_out(probs, v, q_shape))), _box(_f32(probs))

    def attention_backward(self, dout, q, k, v, probs, q_shape, kv_shape, scale, causal, window):
        return _attention_grads(_a(probs).astype(np.float64), dout, q, k, v, scale)

    def flash_attention(self, q, k, v, q_shape, kv_shape, scale, causal, window):
        probs, row_max, row_sum = _attention_probs(q, k, q_shape, kv_shape, scale, causal, window)
        out = _attention_out(probs, v, q_shape)
        return _box(_f32(out)), _box(_f32(row_max)), _box(_f32(row_sum))

    def flash_attention_backward(
        self, dout, q, k, v, out, row_max, row_sum, q_shape, kv_shape, scale, causal, window
    ):
        scores, mask = _attention_scores(q, k, scale, causal, window)
        m, sm = _a(row_max).astype(np.float64), _a(row_sum).astype(np.float64)
        probs = np.where(mask, np.exp(scores - m[..., None]) / sm[..., None], 0.0)
        return _attention_grads(probs, dout, q, k, v, scale)

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
            seg_q = _box(_a(q)[qs : qs + qn][None])
            seg_k, seg_v = _box(_a(k)[ks : ks + kn][None]), _box(_a(v)[ks : ks + kn][None])
            probs, _, _ = _attention_probs(
                seg_q, seg_k, (1, qn, *q_shape[1:]), (1, kn, *kv_shape[1:]), scale, True, window
            )
            out[qs : qs + qn] = _attention_out(probs, seg_v, (1, qn, *q_shape[1:]))[0]
        return _box(out)

    def write_rows(self, dst, shape, dtype, rows, src):
        _a(dst)[_checked("write_rows", rows, shape[0])] = _a(src)

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
        table, page_size = _a(page_table), pages_shape[1]
        keys: list[np.ndarray] = []
        values: list[np.ndarray] = []
        kv_starts: list[int] = []
        for j, length in enumerate(kv_lengths):
            used = -(-length // page_size)
            if used > table_shape[1]:
                raise KernelError(f"paged_attention: sequence {j} needs {used} pages")
            pages = _checked("paged_attention", _box(table[j, :used]), pages_shape[0])
            kv_starts.append(sum(len(k) for k in keys))
            keys.append(_a(k_pages)[pages].reshape(-1, *pages_shape[2:])[:length])
            values.append(_a(v_pages)[pages].reshape(-1, *pages_shape[2:])[:length])
        k = np.concatenate(keys) if keys else np.zeros((0, *pages_shape[2:]), np.float32)
        v = np.concatenate(values) if values else k
        return self.attention_varlen(
            q,
            _box(k),
            _box(v),
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
        return _box(_nf4_weight(codes, absmax, group_range, offset, w_shape, block_size))

    def nf4_linear(self, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
        w = _nf4_weight(codes, absmax, group_range, offset, w_shape, block_size)
        y = _a(x) @ w.T
        return _box((y if bias is None else y + _a(bias)).astype(np.float32))

    def nf4_linear_backward(
        self, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
    ):
        w = _nf4_weight(codes, absmax, group_range, offset, w_shape, block_size)
        return _box((_a(dy) @ w).astype(np.float32))

    def block_dequantize(self, data, format, w_shape):
        from riftco.tensor.ops.blockquant import dequantize_block_array

        return _box(dequantize_block_array(_a(data), format, w_shape))

    def block_linear(self, x, x_shape, data, format, w_shape, bias):
        from riftco.tensor.ops.blockquant import block_linear_reference

        rows, cols = w_shape
        flat = _a(x).reshape(-1, cols)
        y = block_linear_reference(flat, _a(data), format, w_shape)
        if bias is not None:
            y = y + _a(bias)
        return _box(y.astype(np.float32).reshape(*x_shape[:-1], rows))


def _nf4_weight(codes, absmax, group_range, offset, w_shape, block_size) -> np.ndarray:
    from riftco.tensor.ops.quantized import dequantize_nf4_array

    ranges = None if group_range is None else _a(group_range)
    return dequantize_nf4_array(_a(codes), _a(absmax), ranges, offset, w_shape, block_size)


def _f32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _affine(y: np.ndarray, weight, bias) -> np.ndarray:
    if weight is not None:
        y = y * _a(weight)
    if bias is not None:
        y = y + _a(bias)
    return y


def _norm_backward(dy, x, weight, mean, rstd, with_bias):
    a, g0 = _a(x).astype(np.float64), _a(dy).astype(np.float64)
    centered = a - (_a(mean).astype(np.float64)[..., None] if mean is not None else 0.0)
    r = _a(rstd).astype(np.float64)[..., None]
    xhat = centered * r
    g = g0 * _a(weight) if weight is not None else g0
    inner = g - xhat * (g * xhat).mean(axis=-1, keepdims=True)
    if mean is not None:
        inner = inner - g.mean(axis=-1, keepdims=True)
    rows = tuple(range(a.ndim - 1))
    dw = _box(_f32((g0 * xhat).sum(axis=rows))) if weight is not None else None
    db = _box(_f32(g0.sum(axis=rows))) if with_bias else None
    return _box(_f32(inner * r)), dw, db


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def _ce_targets(targets, classes: int, ignore_index: int) -> np.ndarray:
    t = _a(targets)
    bad = (t != ignore_index) & ((t < 0) | (t >= classes))
    if bad.any():
        raise KernelError(
            f"cross_entropy: target {int(t[bad][0])} is out of range for {classes} classes"
        )
    return t


def attention_mask(t: int, s: int, causal: bool, window: int) -> np.ndarray:
    """True where query q (of t, at position s - t + q) may see key k (of s)."""
    if not causal:
        return np.ones((t, s), dtype=bool)
    pos = np.arange(t)[:, None] + (s - t)
    keys = np.arange(s)[None, :]
    visible = keys <= pos
    if window:
        visible &= pos - keys < window
    return visible


def _heads(x, group: int) -> np.ndarray:
    """``[B, S, Hkv, Dh]`` -> ``[B, H, S, Dh]`` with each key/value head repeated."""
    return np.repeat(np.swapaxes(_a(x).astype(np.float64), 1, 2), group, axis=1)


def _attention_scores(q, k, scale, causal, window):
    qh = np.swapaxes(_a(q).astype(np.float64), 1, 2)
    kh = _heads(k, qh.shape[1] // _a(k).shape[2])
    scores = scale * qh @ np.swapaxes(kh, -1, -2)
    mask = attention_mask(scores.shape[-2], scores.shape[-1], causal, window)
    return scores, mask


def _attention_probs(q, k, q_shape, kv_shape, scale, causal, window):
    scores, mask = _attention_scores(q, k, scale, causal, window)
    masked = np.where(mask, scores, -np.inf)
    row_max = masked.max(axis=-1, initial=-np.inf)
    e = np.where(mask, np.exp(masked - row_max[..., None]), 0.0)
    row_sum = e.sum(axis=-1)
    return e / row_sum[..., None], row_max, row_sum


def _attention_out(probs: np.ndarray, v, q_shape) -> np.ndarray:
    vh = _heads(v, q_shape[2] // _a(v).shape[2])
    return np.swapaxes(probs @ vh, 1, 2)


def _attention_grads(probs, dout, q, k, v, scale):
    h, hkv = _a(q).shape[2], _a(k).shape[2]
    group = h // hkv
    qh = np.swapaxes(_a(q).astype(np.float64), 1, 2)
    doh = np.swapaxes(_a(dout).astype(np.float64), 1, 2)
    kh, vh = _heads(k, group), _heads(v, group)
    dv = np.swapaxes(probs, -1, -2) @ doh
    dp = doh @ np.swapaxes(vh, -1, -2)
    ds = probs * (dp - (probs * dp).sum(axis=-1, keepdims=True))
    dq = scale * ds @ kh
    dk = scale * np.swapaxes(ds, -1, -2) @ qh

    def fold(g):  # sum the query heads of each group -> [B, S, Hkv, Dh]
        b, _, s, dh = g.shape
        return np.swapaxes(g.reshape(b, hkv, group, s, dh).sum(axis=2), 1, 2)

    return _box(_f32(np.swapaxes(dq, 1, 2))), _box(_f32(fold(dk))), _box(_f32(fold(dv)))


def create_reference_backend() -> NumpyReferenceBackend:
    return NumpyReferenceBackend()


REFERENCE_ENTRY_POINT = EntryPoint(
    name="reference", value="riftco.testing.tensor:create_reference_backend", group=registry.GROUP
)


@contextlib.contextmanager
def extra_entry_points(*eps: EntryPoint, replace: bool = False) -> Iterator[None]:
    """Make discovery see ``eps`` (in addition to, or instead of, the installed ones)."""
    original = registry.entry_points

    def patched(*, group: str):
        found = [] if replace else list(original(group=group))
        # Listed first, so a patched name wins over an installed plugin of that name.
        return [ep for ep in eps if ep.group == group] + found

    registry.entry_points = patched  # type: ignore[assignment]  # a stand-in for discovery
    registry.reset_discovery()
    try:
        yield
    finally:
        registry.entry_points = original
        registry.reset_discovery()


def _fixture_params() -> list:
    params: list[Any] = []
    for info in registry.backends():
        if info.available:
            params.append(info.name)
        elif info.name != "reference":
            params.append(pytest.param(info.name, marks=pytest.mark.skip(reason=info.reason)))
    return [*params, "reference"]


def backend_names() -> Sequence[str]:
    return [p for p in _fixture_params() if isinstance(p, str)]


@pytest.fixture(params=_fixture_params())
def backend(request) -> Iterator[Backend]:
    """Every available backend in turn (cpu first, then plugins, then the reference)."""
    if request.param == "reference":
        with extra_entry_points(REFERENCE_ENTRY_POINT):
            yield registry.get_backend("reference")
    else:
        yield registry.get_backend(request.param)
