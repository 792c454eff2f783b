"""Batched matmul with broadcast batch axes and transposed reads."""

from __future__ import annotations

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import (
    Runtime,
    Storage,
    groups_for,
    shape_size,
)
from riftco.tensor.plugin import DType, broadcast_strides


def matmul(rt: Runtime, a: Storage, a_shape, b: Storage, b_shape, ta: bool, tb: bool) -> Storage:
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise GpuError(f"matmul: expected operands of rank >= 2, found {a_shape} and {b_shape}")
    ar, ac = int(a_shape[-2]), int(a_shape[-1])
    br, bc = int(b_shape[-2]), int(b_shape[-1])
    m, k = (ac, ar) if ta else (ar, ac)
    k2, n = (bc, br) if tb else (br, bc)
    if k != k2:
        raise GpuError(f"matmul: inner sizes differ ({a_shape} and {b_shape})")
    a_batch, b_batch = list(a_shape[:-2]), list(b_shape[:-2])
    nd = max(len(a_batch), len(b_batch))
    a_batch = [1] * (nd - len(a_batch)) + a_batch
    b_batch = [1] * (nd - len(b_batch)) + b_batch
    batch = [max(x, y) for x, y in zip(a_batch, b_batch, strict=True)]
    count = shape_size(batch)
    out = rt.empty(count * m * n, DType.float32)
    if count == 0 or m == 0 or n == 0:
        return out
    if count > 65535:
        raise GpuError(f"matmul: {count} batch entries exceed one dispatch (65535)")
    a_steps = [s * ar * ac for s in broadcast_strides(a_batch, batch)]
    b_steps = [s * br * bc for s in broadcast_strides(b_batch, batch)]
    a_m, a_k = (1, ac) if ta else (ac, 1)
    b_k, b_n = (1, bc) if tb else (bc, 1)
    params = [m, n, k, a_m, a_k, b_k, b_n, nd, *batch, *a_steps, *b_steps]
    if k == 0:
        rt.run(rt.kernel("fill"), [out], [out.count, 0], groups_for(out.count))
        return out
    groups = (-(-n // 32), -(-m // 32), count)
    rt.run(dense_matmul(rt), [a, b, out], params, groups)
    return out


def dense_matmul(rt: Runtime):
    return rt.kernel(
        "matmul",
        BDECL="@group(0) @binding(2) var<storage, read> b: array<f32>;",
        EXTRA="",
        LOADB="b[b0 + (k0 + r) * P[5] + (col0 + s) * P[6]]",
    )
