"""Packed NF4 weights: dequantization, and the linear layer and its input
gradient as tiled matmuls that decode the weight tile by tile (the float32
weight is never materialized)."""

from __future__ import annotations

from riftco.backends.metal import elementwise, linalg
from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, f32bits, groups_for, snippet
from riftco.tensor.plugin import DType

_F32 = DType.float32


def _check(
    codes: Storage, absmax: Storage, group_range, w_shape, block_size: int
) -> tuple[int, int]:
    rows, cols = int(w_shape[0]), int(w_shape[1])
    n = rows * cols
    if block_size <= 0:
        raise GpuError(f"nf4: block size must be positive, found {block_size}")
    blocks = -(-n // block_size)
    if codes.count != -(-n // 2) or absmax.count != blocks:
        raise GpuError(
            f"nf4: a weight {list(w_shape)} in blocks of {block_size} needs {-(-n // 2)} code "
            f"bytes and {blocks} scales, found {codes.count} and {absmax.count}"
        )
    if group_range is not None and group_range.count != -(-blocks // 256):
        raise GpuError(
            f"nf4: {blocks} double-quantized scales need {-(-blocks // 256)} group ranges, "
            f"found {group_range.count}"
        )
    return rows, cols


def _scale_type(absmax: Storage) -> str:
    return "u32" if absmax.dtype is DType.uint8 else "f32"


def dequantize(rt: Runtime, codes, absmax, group_range, offset, w_shape, block_size):
    rows, cols = _check(codes, absmax, group_range, w_shape, block_size)
    out = rt.empty(rows * cols, _F32)
    kernel = rt.kernel("nf4_dequantize", TS=_scale_type(absmax))
    params = [out.count, block_size, int(group_range is not None), f32bits(offset)]
    buffers = [codes, absmax, group_range if group_range is not None else absmax, out]
    rt.run(kernel, buffers, params, groups_for(out.count))
    return out


def _nf4_matmul(rt, x, m, codes, absmax, group_range, offset, n, k, b_k, b_n, block_size):
    out = rt.empty(m * n, _F32)
    if m == 0 or n == 0:
        return out
    extra = (
        f"@group(0) @binding(4) var<storage, read> absmax: array<{_scale_type(absmax)}>;\n"
        "@group(0) @binding(5) var<storage, read> group_range: array<f32>;\n" + snippet("nf4")
    )
    kernel = linalg.matmul_kernel(
        rt,
        bdecl="@group(0) @binding(2) var<storage, read> codes: array<u32>;",
        extra=extra,
        loadb="weight_at((k0 + r) * P[5] + (col0 + s) * P[6], P[8], P[9], pf(10u))",
    )
    params = [m, n, k, k, 1, b_k, b_n, 0, block_size, int(group_range is not None), f32bits(offset)]
    gr = group_range if group_range is not None else absmax
    rt.run(kernel, [x, codes, out, absmax, gr], params, linalg.matmul_groups(m, n, 1))
    return out


def linear(rt: Runtime, x, x_shape, codes, absmax, group_range, offset, w_shape, block_size, bias):
    rows, cols = _check(codes, absmax, group_range, w_shape, block_size)
    m = x.count // cols if cols else 0
    # out[r, o] = sum_c x[r, c] W[o, c]: B[c, o] is weight element o * cols + c.
    out = _nf4_matmul(rt, x, m, codes, absmax, group_range, offset, rows, cols, 1, cols, block_size)
    if bias is not None:
        out = elementwise.binary(rt, "add", out, (m, rows), bias, (rows,), (m, rows), _F32)
    return out


def linear_backward(
    rt: Runtime, dy, dy_shape, codes, absmax, group_range, offset, w_shape, block_size
):
    rows, cols = _check(codes, absmax, group_range, w_shape, block_size)
    m = dy.count // rows if rows else 0
    # dx[r, c] = sum_o dy[r, o] W[o, c]: B[o, c] is weight element o * cols + c.
    return _nf4_matmul(
        rt, dy, m, codes, absmax, group_range, offset, cols, rows, cols, 1, block_size
    )
