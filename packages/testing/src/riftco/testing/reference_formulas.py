"""The numpy reference backend's storage and its float64 formulas: norms, losses,
attention, NF4 (riftco.testing.reference is the backend that calls them).

Every function takes and gives ``ReferenceStorage`` boxes (``unbox`` / ``box``) or plain
arrays, as its name says; nothing here is a kernel: each is the formula itself.
"""

from __future__ import annotations

import numpy as np

import riftco.tensor as rt
from riftco.tensor.plugin import KernelError


class ReferenceStorage:
    """The reference backend's storage: a private numpy array in a box."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


def unbox(x: ReferenceStorage) -> np.ndarray:
    if not isinstance(x, ReferenceStorage):
        raise TypeError(f"reference backend got a foreign storage handle {type(x).__name__}")
    return x.array


def box(array) -> ReferenceStorage:
    return ReferenceStorage(np.asarray(array, order="C"))


def checked_indices(op: str, indices: ReferenceStorage, n: int) -> np.ndarray:
    idx = unbox(indices)
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


def nf4_weight(codes, absmax, group_range, offset, w_shape, block_size) -> np.ndarray:
    ranges = None if group_range is None else unbox(group_range)
    return rt.dequantize_nf4_array(unbox(codes), unbox(absmax), ranges, offset, w_shape, block_size)


def f32(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def affine(y: np.ndarray, weight, bias) -> np.ndarray:
    if weight is not None:
        y = y * unbox(weight)
    if bias is not None:
        y = y + unbox(bias)
    return y


def norm_backward(dy, x, weight, mean, rstd, with_bias):
    a, g0 = unbox(x).astype(np.float64), unbox(dy).astype(np.float64)
    centered = a - (unbox(mean).astype(np.float64)[..., None] if mean is not None else 0.0)
    r = unbox(rstd).astype(np.float64)[..., None]
    xhat = centered * r
    g = g0 * unbox(weight) if weight is not None else g0
    inner = g - xhat * (g * xhat).mean(axis=-1, keepdims=True)
    if mean is not None:
        inner = inner - g.mean(axis=-1, keepdims=True)
    rows = tuple(range(a.ndim - 1))
    dw = box(f32((g0 * xhat).sum(axis=rows))) if weight is not None else None
    db = box(f32(g0.sum(axis=rows))) if with_bias else None
    return box(f32(inner * r)), dw, db


def logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def cross_entropy_targets(targets, classes: int, ignore_index: int) -> np.ndarray:
    t = unbox(targets)
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


def repeat_heads(x, group: int) -> np.ndarray:
    """``[B, S, Hkv, Dh]`` -> ``[B, H, S, Dh]`` with each key/value head repeated."""
    return np.repeat(np.swapaxes(unbox(x).astype(np.float64), 1, 2), group, axis=1)


def attention_scores(q, k, scale, causal, window):
    qh = np.swapaxes(unbox(q).astype(np.float64), 1, 2)
    kh = repeat_heads(k, qh.shape[1] // unbox(k).shape[2])
    scores = scale * qh @ np.swapaxes(kh, -1, -2)
    mask = attention_mask(scores.shape[-2], scores.shape[-1], causal, window)
    return scores, mask


def attention_probs(q, k, q_shape, kv_shape, scale, causal, window):
    scores, mask = attention_scores(q, k, scale, causal, window)
    masked = np.where(mask, scores, -np.inf)
    row_max = masked.max(axis=-1, initial=-np.inf)
    e = np.where(mask, np.exp(masked - row_max[..., None]), 0.0)
    row_sum = e.sum(axis=-1)
    return e / row_sum[..., None], row_max, row_sum


def attention_out(probs: np.ndarray, v, q_shape) -> np.ndarray:
    vh = repeat_heads(v, q_shape[2] // unbox(v).shape[2])
    return np.swapaxes(probs @ vh, 1, 2)


def attention_grads(probs, dout, q, k, v, scale):
    h, hkv = unbox(q).shape[2], unbox(k).shape[2]
    group = h // hkv
    qh = np.swapaxes(unbox(q).astype(np.float64), 1, 2)
    doh = np.swapaxes(unbox(dout).astype(np.float64), 1, 2)
    kh, vh = repeat_heads(k, group), repeat_heads(v, group)
    dv = np.swapaxes(probs, -1, -2) @ doh
    dp = doh @ np.swapaxes(vh, -1, -2)
    ds = probs * (dp - (probs * dp).sum(axis=-1, keepdims=True))
    dq = scale * ds @ kh
    dk = scale * np.swapaxes(ds, -1, -2) @ qh

    def fold(g):  # sum the query heads of each group -> [B, S, Hkv, Dh]
        b, _, s, dh = g.shape
        return np.swapaxes(g.reshape(b, hkv, group, s, dh).sum(axis=2), 1, 2)

    return box(f32(np.swapaxes(dq, 1, 2))), box(f32(fold(dk))), box(f32(fold(dv)))


__all__ = [
    "ReferenceStorage",
    "affine",
    "attention_grads",
    "attention_mask",
    "attention_out",
    "attention_probs",
    "attention_scores",
    "box",
    "causal_mask",
    "checked_indices",
    "cross_entropy_targets",
    "f32",
    "logsumexp",
    "nf4_weight",
    "norm_backward",
    "repeat_heads",
    "unbox",
]
