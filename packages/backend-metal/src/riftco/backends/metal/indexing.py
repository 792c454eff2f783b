"""Indexing: index_select, gather, their adjoints (accumulated in index order) and
key/value row writes. Indices are checked on the device first and the first bad
one is read back (a synchronization) to raise the CPU backend's error."""

from __future__ import annotations

from riftco.backends.metal.runtime import (
    WGSL_TYPE,
    Runtime,
    Storage,
    groups_for,
    shape_size,
    split_axis,
)
from riftco.tensor.plugin import DType


def index_select(
    rt: Runtime, x: Storage, shape, dtype: DType, axis: int, indices: Storage, count: int
):
    outer, n, inner = split_axis(shape, axis)
    rt.check_indices("index_select", indices, n)
    total = outer * count * inner
    out = rt.empty(total, dtype)
    kernel = rt.kernel("index", "select_rows", T=WGSL_TYPE[dtype])
    rt.run(kernel, [x, indices, out], [total, n, inner, count], groups_for(total))
    return out


def gather(rt: Runtime, x: Storage, shape, dtype: DType, axis: int, indices: Storage, index_shape):
    _, n, inner = split_axis(shape, axis)
    rt.check_indices("gather", indices, n)
    total = shape_size(index_shape)
    m = int(index_shape[axis])
    out = rt.empty(total, dtype)
    kernel = rt.kernel("index", "gather", T=WGSL_TYPE[dtype])
    rt.run(kernel, [x, indices, out], [total, n, inner, m], groups_for(total))
    return out


def _accumulate(rt, op, base, shape, axis, indices, src, m, per_element):
    outer, n, inner = split_axis(shape, axis)
    rt.check_indices(op, indices, n)
    out = rt.empty(base.count, DType.float32)
    rt.copy(base, out, base.count)
    lanes = outer * inner
    params = [lanes, n, inner, m, int(per_element)]
    rt.run(rt.kernel("index_add"), [src, indices, out], params, groups_for(lanes))
    return out


def index_add(rt: Runtime, base, shape, axis, indices, src, src_shape):
    return _accumulate(
        rt, "index_add", base, shape, axis, indices, src, int(src_shape[axis]), False
    )


def scatter_add(rt: Runtime, base, shape, axis, indices, index_shape, src):
    return _accumulate(
        rt, "scatter_add", base, shape, axis, indices, src, int(index_shape[axis]), True
    )


def write_rows(rt: Runtime, dst: Storage, shape, rows: Storage, src: Storage) -> None:
    rt.check_indices("write_rows", rows, int(shape[0]))
    dst.written()
    row = shape_size(shape[1:])
    total = rows.count * row
    rt.run(rt.kernel("write_rows"), [src, rows, dst], [total, row], groups_for(total))
