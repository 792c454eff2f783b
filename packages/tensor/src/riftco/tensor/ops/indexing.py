"""Index selection, embedding lookup, gather, and their scatter-add adjoints."""

from __future__ import annotations

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import (
    check_same_backend,
    normalize_axis,
    require_dtype,
    require_tensor,
)
from riftco.tensor.tensor import Tensor

F32, I64 = DType.float32, DType.int64


def index_select(x: Tensor, axis: int, indices: Tensor) -> Tensor:
    """``x`` restricted to ``indices`` (1-D int64, each in range) along ``axis``."""
    x, indices = require_tensor("index_select", x), require_tensor("index_select", indices)
    check_same_backend("index_select", x, indices)
    require_dtype("index_select", indices, I64)
    if indices.ndim != 1:
        raise ShapeError(f"index_select: indices must be 1-D, found {indices._shape}")
    axis = normalize_axis("index_select", axis, x.ndim)
    data = x._backend.index_select(
        x._data, x._shape, x._dtype, axis, indices._data, indices._shape[0]
    )
    shape = x._shape[:axis] + indices._shape + x._shape[axis + 1 :]
    return Tensor._wrap(data, shape, x._dtype, x._backend)


def embedding(weight: Tensor, ids: Tensor) -> Tensor:
    """Rows of ``weight`` [vocab, dim] for int64 ``ids`` of any shape -> [*ids.shape, dim]."""
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be [vocab, dim], found {weight._shape}")
    flat = index_select(weight, 0, ids.reshape(-1))
    return flat.reshape(*ids._shape, weight._shape[1])


def index_add(base: Tensor, axis: int, indices: Tensor, src: Tensor) -> Tensor:
    """``base`` plus ``src`` added at ``indices`` along ``axis`` (repeats accumulate)."""
    for t in (base, indices, src):
        require_tensor("index_add", t)
    check_same_backend("index_add", base, indices, src)
    require_dtype("index_add", base, F32)
    require_dtype("index_add", src, F32)
    require_dtype("index_add", indices, I64)
    axis = normalize_axis("index_add", axis, base.ndim)
    want = base._shape[:axis] + indices._shape + base._shape[axis + 1 :]
    if indices.ndim != 1 or src._shape != want:
        raise ShapeError(
            f"index_add: base {base._shape}, indices {indices._shape} and src "
            f"{src._shape} disagree along axis {axis} (src should be {want})"
        )
    data = base._backend.index_add(
        base._data, base._shape, axis, indices._data, src._data, src._shape
    )
    return Tensor._wrap(data, base._shape, F32, base._backend)


def _check_gather(op: str, x: Tensor, axis: int, indices: Tensor) -> int:
    check_same_backend(op, x, indices)
    require_dtype(op, indices, I64)
    axis = normalize_axis(op, axis, x.ndim)
    same = indices.ndim == x.ndim and all(
        a == b for i, (a, b) in enumerate(zip(indices._shape, x._shape)) if i != axis
    )
    if not same:
        raise ShapeError(f"{op}: indices {indices._shape} must match {x._shape} off axis {axis}")
    return axis


def gather(x: Tensor, axis: int, indices: Tensor) -> Tensor:
    """``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along ``axis`` (torch.gather)."""
    axis = _check_gather("gather", x, axis, indices)
    data = x._backend.gather(x._data, x._shape, x._dtype, axis, indices._data, indices._shape)
    return Tensor._wrap(data, indices._shape, x._dtype, x._backend)


def scatter_add(base: Tensor, axis: int, indices: Tensor, src: Tensor) -> Tensor:
    """``base`` with ``src`` added at ``indices`` along ``axis``; the adjoint of gather."""
    axis = _check_gather("scatter_add", base, axis, indices)
    check_same_backend("scatter_add", base, src)
    require_dtype("scatter_add", base, F32)
    require_dtype("scatter_add", src, F32)
    if src._shape != indices._shape:
        raise ShapeError(f"scatter_add: src {src._shape} must match indices {indices._shape}")
    data = base._backend.scatter_add(
        base._data, base._shape, axis, indices._data, indices._shape, src._data
    )
    return Tensor._wrap(data, base._shape, F32, base._backend)
