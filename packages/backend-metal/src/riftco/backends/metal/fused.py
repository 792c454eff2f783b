"""Fused neural-network kernels: layer and RMS norms with their gradients,
activation gradients, softmax cross-entropy and rotary embeddings."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, f32bits, groups_for, word
from riftco.tensor.plugin import DType

_F32 = DType.float32


def _rows(shape) -> tuple[int, int]:
    d = int(shape[-1]) if shape else 1
    rows = 1
    for s in shape[:-1]:
        rows *= int(s)
    return rows, d


def norm(rt: Runtime, x: Storage, shape, weight, bias, eps: float, rms: bool):
    rows, d = _rows(shape)
    y = rt.empty(x.count, _F32)
    s1 = rt.empty(rows, _F32)
    s2 = rt.empty(rows if not rms else 1, _F32)
    params = [rows, d, f32bits(eps), int(rms), int(weight is not None), int(bias is not None)]
    buffers = [x, weight or x, bias or x, y, s1, s2]
    rt.run(rt.kernel("norm"), buffers, params, groups_for(rows, 1))
    return (y, s1) if rms else (y, s1, s2)


def norm_backward(
    rt: Runtime, dy, x, shape, weight, stats: list[Storage], rms: bool, with_bias: bool
):
    rows, d = _rows(shape)
    if rms:
        joined = stats[0]
    else:
        joined = rt.empty(2 * rows, _F32)
        rt.copy(stats[0], joined, rows)
        rt.copy(stats[1], joined, rows, 0, rows)
    dx = rt.empty(x.count, _F32)
    params = [rows, d, int(rms), int(weight is not None)]
    rt.run(
        rt.kernel("norm_backward"), [x, weight or x, dy, joined, dx], params, groups_for(rows, 1)
    )
    dw = db = None
    if weight is not None or with_bias:
        dw, db = rt.empty(d, _F32), rt.empty(d, _F32)
        rt.run(rt.kernel("columns"), [x, dy, joined, dw, db], [rows, d, int(rms)], groups_for(d))
    return dx, (dw if weight is not None else None), (db if with_bias else None)


#: ``activation_backward``'s WGSL derivative of each activation, by name.
DERIVATIVES = {
    "gelu": (
        "let cdf = 0.5 * erfc_f(-v * 0.70710678118654752); "
        "return cdf + v * 0.3989422804014327 * exp_safe(-0.5 * v * v);"
    ),
    "gelu_tanh": (
        "let k = 0.7978845608028654; let u = k * (v + 0.044715 * v * v * v); "
        "let th = tanh_safe(u); "
        "return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);"
    ),
    "silu": "let s = sigmoid_f(v); return s * (1.0 + v * (1.0 - s));",
}


def activation_backward(rt: Runtime, op: str, x: Storage, dy: Storage) -> Storage:
    body = DERIVATIVES.get(op)
    if body is None:
        raise GpuError(f"activation_backward: unknown activation {op!r} (gelu, gelu_tanh, silu)")
    dx = rt.empty(x.count, _F32)
    rt.run(rt.kernel("act_backward", BODY=body), [x, dy, dx], [x.count], groups_for(x.count))
    return dx


def cross_entropy(rt: Runtime, logits, shape, targets, ignore_index: int):
    n, classes = int(shape[0]), int(shape[1])
    rt.check_indices("cross_entropy", targets, classes, allow=_ignore(ignore_index))
    losses, lse = rt.empty(n, _F32), rt.empty(n, _F32)
    params = [n, classes, word(_ignore(ignore_index))]
    rt.run(rt.kernel("cross_entropy"), [logits, targets, losses, lse], params, groups_for(n, 1))
    return losses, lse


def _ignore(ignore_index: int) -> int:
    # Targets live as int32; an ignore index outside that range matches no target.
    return ignore_index if -(1 << 31) <= ignore_index < (1 << 31) else -(1 << 31)


def cross_entropy_backward(rt: Runtime, logits, shape, targets, lse, grad, ignore_index: int):
    count = int(shape[0]) * int(shape[1])
    out = rt.empty(count, _F32)
    params = [count, int(shape[1]), word(_ignore(ignore_index))]
    buffers = [logits, targets, lse, grad, out]
    rt.run(rt.kernel("cross_entropy_backward"), buffers, params, groups_for(count))
    return out


@lru_cache(maxsize=64)
def _inverse_frequencies(theta: float, head_dim: int) -> np.ndarray:
    # As the CPU kernel: 1 / theta**(2i / head_dim), every step in float32.
    exponent = (2 * np.arange(head_dim // 2)).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)


def rotary(rt: Runtime, x: Storage, shape, positions: Storage, theta: float, inverse: bool):
    heads, head_dim = int(shape[-2]), int(shape[-1])
    if head_dim % 2 or head_dim == 0:
        raise GpuError(f"rotary: head_dim must be even and positive, found {head_dim}")
    if not (theta > 0 and np.isfinite(theta)):
        raise GpuError(f"rotary: theta must be positive, found {theta}")
    bad = rt.first_out_of_range(positions, (1 << 31) - 1)
    if bad is not None:
        p = int(rt.download(positions)[bad])
        raise GpuError(f"rotary: position {p} of row {bad} is negative")
    table = rt.upload(_inverse_frequencies(float(theta), head_dim), _F32)
    out = rt.empty(x.count, _F32)
    pairs = x.count // 2
    params = [pairs, heads, head_dim // 2, int(inverse)]
    rt.run(rt.kernel("rotary"), [x, positions, table, out], params, groups_for(pairs))
    return out
