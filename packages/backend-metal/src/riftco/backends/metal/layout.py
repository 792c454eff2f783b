"""Storage and layout: uploads, reads, reshapes, in-place assignment, dtype
conversion, strided copies and concatenation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import (
    WGSL_TYPE,
    Runtime,
    Storage,
    groups_for,
    shape_size,
)
from riftco.tensor.plugin import DType

_KINDS = {DType.float32: "float", DType.int64: "int", DType.bool: "bool", DType.uint8: "byte"}


def _convert_body(src: DType, dst: DType) -> str:
    s, d = _KINDS[src], _KINDS[dst]
    if d == "bool":
        zero = {"float": "0.0", "int": "0", "bool": "0u", "byte": "0u"}[s]
        return f"return select(0u, 1u, v != {zero});"
    if d == "float":
        return "return f32(v);"
    if d == "int":
        if s == "float":
            # Truncation toward zero, saturating like a Rust `as` cast (NaN -> 0).
            return (
                "if (is_nan(v)) { return 0; } if (v >= 2147483647.0) { return 2147483647; } "
                "if (v <= -2147483648.0) { return -2147483647 - 1; } return i32(v);"
            )
        return "return i32(v);"
    # uint8
    if s == "float":
        return "if (is_nan(v) || v <= 0.0) { return 0u; } if (v >= 255.0) { return 255u; } return u32(v);"
    if s == "int":
        return "return u32(v) & 255u;"
    return "return v;"


def astype(rt: Runtime, x: Storage, src: DType, dst: DType) -> Storage:
    out = rt.empty(x.count, dst)
    if src is dst:
        rt.copy(x, out, x.count)
        return out
    kernel = rt.kernel("astype", TI=WGSL_TYPE[src], TO=WGSL_TYPE[dst], BODY=_convert_body(src, dst))
    rt.run(kernel, [x, out], [x.count], groups_for(x.count))
    return out


def copy_strided(rt: Runtime, x: Storage, dtype: DType, out_shape, strides, offset) -> Storage:
    n = shape_size(out_shape)
    out = rt.empty(n, dtype)
    dims = [int(d) for d in out_shape] or [1]
    steps = [int(s) for s in strides] or [0]
    if any(s < 0 for s in steps) or offset < 0:
        raise GpuError(f"copy_strided: strides {list(strides)} and offset {offset} must be >= 0")
    params = [n, len(dims), int(offset), *dims, *steps]
    rt.run(rt.kernel("strided"), [x, out], params, groups_for(n))
    return out


def concat(rt: Runtime, xs: Sequence[Storage], shapes, dtype: DType, axis: int) -> Storage:
    out_shape = list(shapes[0])
    out_shape[axis] = sum(int(s[axis]) for s in shapes)
    n = shape_size(out_shape)
    out = rt.empty(n, dtype)
    outer = shape_size(out_shape[:axis])
    inner = shape_size(out_shape[axis + 1 :])
    out_row = out_shape[axis] * inner
    at = 0
    for x, shape in zip(xs, shapes, strict=True):
        in_row = int(shape[axis]) * inner
        if outer == 1:
            rt.copy(x, out, in_row, 0, at)
        elif in_row:
            params = [outer * in_row, in_row, out_row, at]
            rt.run(rt.kernel("blocks"), [x, out], params, groups_for(outer * in_row))
        at += in_row
    return out


def to_numpy(rt: Runtime, x: Storage, shape) -> np.ndarray:
    out = rt.download(x).reshape(shape)
    out.flags.writeable = False
    return out
