"""Elementwise kernels: unary ops, broadcast binary ops and comparisons, where.

Each op's WGSL body is looked up by its name in riftco.tensor's vocabulary (the tables
below, one per element type; a test checks them against the vocabulary by name);
broadcast operands are read through riftco.tensor.plugin's ``broadcast_strides``."""

from __future__ import annotations

from collections.abc import Sequence

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import (
    WGSL_TYPE,
    Runtime,
    Storage,
    groups_for,
    shape_size,
)
from riftco.tensor.plugin import DType, broadcast_strides

UNARY_F32 = {
    "neg": "return -v;",
    "abs": "return abs(v);",
    "exp": "return exp_safe(v);",
    "log": "return log_safe(v);",
    "sqrt": "if (is_nan(v) || v < 0.0) { return nan_f(); } return sqrt(v);",
    "rsqrt": (
        "if (is_nan(v) || v < 0.0) { return nan_f(); } if (v == 0.0) { return inf_f(); } "
        "if (!is_finite(v)) { return 0.0; } return 1.0 / sqrt(v);"
    ),
    "tanh": "return tanh_safe(v);",
    "sigmoid": "return sigmoid_f(v);",
    "relu": "if (v > 0.0 || is_nan(v)) { return v; } return 0.0;",
    "gelu": "return gelu_f(v);",
    "gelu_tanh": "return gelu_tanh_f(v);",
    "silu": "return v * sigmoid_f(v);",
}
UNARY_INT = {"neg": "return -v;", "abs": "return abs(v);"}
UNARY_BOOL = {"logical_not": "return select(0u, 1u, v == 0u);"}

# pow as numpy: integral exponents by repeated squaring (exact like the CPU's powi),
# negative bases only with integral exponents, 0 ** negative = inf.
_POW = """
    if (y == 0.0) { return 1.0; }
    if (is_nan(x) || is_nan(y)) { return nan_f(); }
    let integral = floor(y) == y && abs(y) <= 16777216.0;
    if (x < 0.0 && !integral) { return nan_f(); }
    if (integral && abs(y) <= 64.0) {
        var n = u32(abs(y));
        var base = x;
        var r = 1.0;
        loop {
            if ((n & 1u) != 0u) { r = r * base; }
            n = n >> 1u;
            if (n == 0u) { break; }
            base = base * base;
        }
        if (y < 0.0) { return 1.0 / r; }
        return r;
    }
    if (x == 0.0) { if (y > 0.0) { return 0.0; } return inf_f(); }
    var r = exp2(y * log2(abs(x)));
    if (x < 0.0 && floor(y * 0.5) != y * 0.5) { r = -r; }
    return r;
"""
BINARY_F32 = {
    "add": "return x + y;",
    "sub": "return x - y;",
    "mul": "return x * y;",
    "div": "return x / y;",
    "pow": _POW,
    "maximum": "return max_nan(x, y);",
    "minimum": "return min_nan(x, y);",
}
BINARY_INT = {
    "add": "return x + y;",
    "sub": "return x - y;",
    "mul": "return x * y;",
    "maximum": "return max(x, y);",
    "minimum": "return min(x, y);",
}
COMPARISONS = {
    "eq": "x == y",
    "ne": "x != y",
    "lt": "x < y",
    "le": "x <= y",
    "gt": "x > y",
    "ge": "x >= y",
    "logical_and": "(x != {zero}) && (y != {zero})",
    "logical_or": "(x != {zero}) || (y != {zero})",
}


def _zero(t: str) -> str:
    return {"f32": "0.0", "i32": "0", "u32": "0u"}[t]


_STRIDED = """
    let nd = P[1];
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    var ic = 0u;
    for (var d = nd; d > 0u; d = d - 1u) {
        let dim = P[1u + d];
        let k = rest % dim;
        rest = rest / dim;
        ia = ia + k * P[1u + nd + d];
        ib = ib + k * P[1u + 2u * nd + d];
        ic = ic + k * P[1u + 3u * nd + d];
    }
"""


def _index_code(counts: Sequence[int], out_shape: Sequence[int]) -> str:
    """Flat indexing where every operand has the output's size (broadcasting only
    repeats axes of size 1, so its layout is the output's) or one element; the
    general strided loop otherwise."""
    n = shape_size(out_shape)
    kinds = []
    for count in counts:
        if count == 1:
            kinds.append("0u")
        elif count == n:
            kinds.append("i")
        else:
            return _STRIDED
    kinds += ["0u"] * (3 - len(kinds))
    return "".join(f"    let {v} = {k};\n" for v, k in zip(("ia", "ib", "ic"), kinds, strict=True))


def unary(rt: Runtime, op: str, x: Storage, dtype: DType) -> Storage:
    table = {DType.float32: UNARY_F32, DType.int64: UNARY_INT, DType.bool: UNARY_BOOL}
    body = table.get(dtype, {}).get(op)
    if body is None:
        raise GpuError(f"unary: {op!r} is not defined for {dtype.value}")
    t = WGSL_TYPE[dtype]
    out = rt.empty(x.count, dtype)
    rt.run(rt.kernel("unary", T=t, BODY=body), [x, out], [x.count], groups_for(x.count))
    return out


def _broadcast(
    rt: Runtime,
    body: str,
    ta: str,
    to: str,
    out_dtype: DType,
    operands: Sequence[tuple[Storage, Sequence[int]]],
    out_shape: Sequence[int],
) -> Storage:
    n = shape_size(out_shape)
    out = rt.empty(n, out_dtype)
    dims = [int(d) for d in out_shape] or [1]
    strides = [broadcast_strides(s, out_shape) or [0] for _, s in operands]
    while len(strides) < 3:
        strides.append([0] * len(dims))
    if len(operands) == 3:
        extra = "@group(0) @binding(4) var<storage, read> c: array<u32>;"
        store = "out[i] = select(b[ib], a[ia], c[ic] != 0u);"
    else:
        extra, store = "", "out[i] = op(a[ia], b[ib]);"
    index = _index_code([x.count for x, _ in operands], out_shape)
    kernel = rt.kernel("broadcast", TA=ta, TO=to, BODY=body, EXTRA=extra, STORE=store, INDEX=index)
    params = [n, len(dims), *dims, *strides[0], *strides[1], *strides[2]]
    buffers = [operands[0][0], operands[1][0], out]
    if len(operands) == 3:
        buffers.append(operands[2][0])
    rt.run(kernel, buffers, params, groups_for(n))
    return out


def binary(rt, op, a, a_shape, b, b_shape, out_shape, dtype: DType) -> Storage:
    table = {DType.float32: BINARY_F32, DType.int64: BINARY_INT}.get(dtype, {})
    body = table.get(op)
    if body is None:
        raise GpuError(f"binary: {op!r} is not defined for {dtype.value}")
    t = WGSL_TYPE[dtype]
    return _broadcast(rt, body, t, t, dtype, [(a, a_shape), (b, b_shape)], out_shape)


def compare(rt, op, a, a_shape, b, b_shape, out_shape, dtype: DType) -> Storage:
    t = WGSL_TYPE[dtype]
    expr = COMPARISONS.get(op)
    if expr is None:
        raise GpuError(f"compare: unknown op {op!r}")
    body = f"return select(0u, 1u, {expr.format(zero=_zero(t))});"
    return _broadcast(rt, body, t, "u32", DType.bool, [(a, a_shape), (b, b_shape)], out_shape)


def where(rt, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype: DType) -> Storage:
    operands = [(a, a_shape), (b, b_shape), (cond, cond_shape)]
    return _broadcast(rt, "return x;", "u32", "u32", dtype, operands, out_shape)
