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
        raise ShapeError(f"index_select: indices must be 1-D, found {indices.shape}")
    axis = normalize_axis("index_select", axis, x.ndim)
    data = x.backend.index_select(x._data, x.shape, x.dtype, axis, indices._data, indices.shape[0])
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    return Tensor._wrap(data, shape, x.dtype, x.backend)


def embedding(weight: Tensor, ids: Tensor) -> Tensor:
    """Rows of ``weight`` [vocab, dim] for int64 ``ids`` of any shape -> [*ids.shape, dim]."""
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be [vocab, dim], found {weight.shape}")
    flat = index_select(weight, 0, ids.reshape(-1))
    return flat.reshape(*ids.shape, weight.shape[1])


def index_add(base: Tensor, axis: int, indices: Tensor, src: Tensor) -> Tensor:
    """``base`` plus ``src`` added at ``indices`` along ``axis`` (repeats accumulate)."""
    for t in (base, indices, src):
        require_tensor("index_add", t)
    check_same_backend("index_add", base, indices, src)
    require_dtype("index_add", base, F32)
    require_dtype("index_add", src, F32)
    require_dtype("index_add", indices, I64)
    axis = normalize_axis("index_add", axis, base.ndim)
    want = base.shape[:axis] + indices.shape + base.shape[axis + 1 :]
    if indices.ndim != 1 or src.shape != want:
        raise ShapeError(
            f"index_add: base {base.shape}, indices {indices.shape} and src "
            f"{src.shape} disagree along axis {axis} (src should be {want})"
        )
    data = base.backend.index_add(base._data, base.shape, axis, indices._data, src._data, src.shape)
    return Tensor._wrap(data, base.shape, F32, base.backend)


def _check_gather(op: str, x: Tensor, axis: int, indices: Tensor) -> int:
    check_same_backend(op, x, indices)
    require_dtype(op, indices, I64)
    axis = normalize_axis(op, axis, x.ndim)
    same = indices.ndim == x.ndim and all(
        a == b for i, (a, b) in enumerate(zip(indices.shape, x.shape)) if i != axis
    )
    if not same:
        raise ShapeError(f"{op}: indices {indices.shape} must match {x.shape} off axis {axis}")
    return axis


def gather(x: Tensor, axis: int, indices: Tensor) -> Tensor:
    """``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along ``axis`` (torch.gather)."""
    axis = _check_gather("gather", x, axis, indices)
    data = x.backend.gather(x._data, x.shape, x.dtype, axis, indices._data, indices.shape)
    return Tensor._wrap(data, indices.shape, x.dtype, x.backend)


def scatter_add(base: Tensor, axis: int, indices: Tensor, src: Tensor) -> Tensor:
    """``base`` with ``src`` added at ``indices`` along ``axis``; the adjoint of gather."""
    axis = _check_gather("scatter_add", base, axis, indices)
    check_same_backend("scatter_add", base, src)
    require_dtype("scatter_add", base, F32)
    require_dtype("scatter_add", src, F32)
    if src.shape != indices.shape:
        raise ShapeError(f"scatter_add: src {src.shape} must match indices {indices.shape}")
    data = base.backend.scatter_add(
        base._data, base.shape, axis, indices._data, indices.shape, src._data
    )
    return Tensor._wrap(data, base.shape, F32, base.backend)


__all__ = [
    "embedding",
    "gather",
    "index_add",
    "index_select",
    "scatter_add",
]
