"""Reductions over axes (with keepdims), argmax, and softmax."""

from __future__ import annotations

from collections.abc import Sequence

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import normalize_axis, require_dtype
from riftco.tensor.tensor import Tensor

F32, I64 = DType.float32, DType.int64


def _axes(op: str, x: Tensor, axis: int | Sequence[int] | None) -> list[int]:
    if axis is None:
        return list(range(x.ndim))
    if isinstance(axis, (list, tuple)):
        axes = sorted({normalize_axis(op, a, x.ndim) for a in axis})
        if len(axes) != len(axis):
            raise ShapeError(f"{op}: repeated axis in {axis}")
        return axes
    return [normalize_axis(op, axis, x.ndim)]


def _reduce(op: str, x: Tensor, axis, keepdims: bool, allowed: tuple[DType, ...]) -> Tensor:
    if x.dtype not in allowed:
        require_dtype(op, x, *allowed)
    axes = _axes(op, x, axis)
    if op in ("max", "min", "mean") and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{op}: reducing over an empty axis of {x.shape} has no value")
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    out_shape = kept if keepdims else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if not axes:
        return x * x if op == "sum_squares" else x
    data, shape = x._data, x.shape
    # Merge runs of adjacent reduced axes so one kernel call handles each run;
    # reduce runs from the last to the first so earlier axis numbers stay valid.
    runs: list[list[int]] = []
    for a in axes:
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    backend = x.backend
    mean_count = 1
    kernel_op = "sum" if op == "mean" else op
    for run in reversed(runs):
        first, last = run[0], run[-1]
        n = 1
        for a in run:
            n *= shape[a]
        merged = shape[:first] + (n,) + shape[last + 1 :]
        if merged != shape:
            data = backend.reshape(data, shape, merged)
        data = backend.reduce(kernel_op, data, merged, x.dtype, first)
        # Later runs combine partial results: squares and means were taken once.
        kernel_op = "sum" if op in ("sum_squares", "mean") else op
        shape = merged[:first] + merged[first + 1 :]
        mean_count *= n
    result = Tensor._wrap(data, shape, x.dtype, backend)
    if op == "mean":
        result = result / float(mean_count)
    if out_shape != shape:
        result = result.reshape(out_shape)
    return result


def sum(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("sum", x, axis, keepdims, (F32, I64))


def mean(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("mean", x, axis, keepdims, (F32,))


def max(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("max", x, axis, keepdims, (F32, I64))


def min(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("min", x, axis, keepdims, (F32, I64))


def sum_squares(x: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Sum of squares, accumulated in float64 (for gradient norms)."""
    return _reduce("sum_squares", x, axis, keepdims, (F32,))


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first largest element along ``axis`` (of the flattened tensor when None)."""
    if x.dtype not in (F32, I64):
        require_dtype("argmax", x, F32, I64)
    if axis is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            raise ShapeError("argmax: empty tensor")
        out = Tensor._wrap(x.backend.argmax(flat._data, flat.shape, x.dtype, 0), (), I64, x.backend)
        return out.reshape((1,) * x.ndim) if keepdims else out
    axis = normalize_axis("argmax", axis, x.ndim)
    if x.shape[axis] == 0:
        raise ShapeError(f"argmax: axis {axis} of {x.shape} is empty")
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    out = Tensor._wrap(x.backend.argmax(x._data, x.shape, x.dtype, axis), shape, I64, x.backend)
    return out.reshape(x.shape[:axis] + (1,) + x.shape[axis + 1 :]) if keepdims else out


def _softmax(op: str, x: Tensor, axis: int, causal: bool, log: bool) -> Tensor:
    require_dtype(op, x, F32)
    if x.ndim == 0:
        raise ShapeError(f"{op}: expected at least one axis, found a 0-d tensor")
    axis = normalize_axis(op, axis, x.ndim)
    if causal:
        if axis != x.ndim - 1 or x.ndim < 2:
            raise ShapeError(
                f"{op}: a causal mask needs [..., queries, keys] scores and axis=-1, "
                f"found shape {x.shape} and axis {axis}"
            )
        if x.shape[-2] > x.shape[-1]:
            raise ShapeError(f"{op}: causal scores {x.shape} have more queries than keys")
    if axis != x.ndim - 1:
        moved = x.transpose(axis, -1)
        return _softmax(op, moved, -1, False, log).transpose(axis, -1)
    data = x.backend.softmax(x._data, x.shape, causal, log)
    return Tensor._wrap(data, x.shape, F32, x.backend)


def softmax(x: Tensor, axis: int = -1, causal: bool = False) -> Tensor:
    """Numerically stable softmax; ``causal`` masks future keys of ``[..., t, s]`` scores."""
    return _softmax("softmax", x, axis, causal, False)


def log_softmax(x: Tensor, axis: int = -1, causal: bool = False) -> Tensor:
    return _softmax("log_softmax", x, axis, causal, True)


__all__ = [
    "argmax",
    "log_softmax",
    "max",
    "mean",
    "min",
    "softmax",
    "sum",
    "sum_squares",
]
