"""Shape and layout ops. ``reshape`` is free; everything else copies through
the backend's single ``copy_strided`` capability (or ``concat``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from riftco.tensor.backend import require_dtype_support
from riftco.tensor.dtypes import DType, as_dtype
from riftco.tensor.errors import IndexOutOfRange, ShapeError
from riftco.tensor.ops._common import (
    Shape,
    broadcast_shapes,
    check_same_backend,
    contiguous_strides,
    normalize_axis,
    require_tensor,
)
from riftco.tensor.tensor import Tensor


def _shape_arg(op: str, shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if all(type(d) is int for d in shape):  # the common case, as it is
        return shape
    for d in shape:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError(f"{op}: dims must be ints, found {shape!r}")
    return tuple(int(d) for d in shape)


def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """The same elements under a new shape (one dim may be -1); never copies."""
    new = _shape_arg("reshape", shape)
    if new == x.shape:
        return x
    size = math.prod(x.shape)
    if -1 in new:
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: at most one -1 in {new}")
        known = -math.prod(new)
        if known <= 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape {x.shape} ({size} elements) to {new}")
        new = tuple(size // known if d == -1 else d for d in new)
    if (new and min(new) < 0) or math.prod(new) != size:
        raise ShapeError(f"reshape: cannot reshape {x.shape} ({size} elements) to {new}")
    if new == x.shape:
        return x
    return Tensor._wrap(x.backend.reshape(x._data, x.shape, new), new, x.dtype, x.backend)


def flatten(x: Tensor) -> Tensor:
    return reshape(x, -1)


def _strided(x: Tensor, out_shape: Shape, strides: Sequence[int], offset: int = 0) -> Tensor:
    data = x.backend.copy_strided(x._data, x.shape, x.dtype, out_shape, list(strides), offset)
    return Tensor._wrap(data, out_shape, x.dtype, x.backend)


def copy(x: Tensor) -> Tensor:
    """A fresh copy of ``x`` (its own storage)."""
    return _strided(x, x.shape, contiguous_strides(x.shape))


def permute(x: Tensor, *axes: int | Sequence[int]) -> Tensor:
    axes = _shape_arg("permute", axes)
    if sorted(a % max(x.ndim, 1) for a in axes) != list(range(x.ndim)) or len(axes) != x.ndim:
        raise ShapeError(f"permute: {axes} is not a permutation of the axes of {x.shape}")
    order = tuple(a % x.ndim for a in axes)
    if order == tuple(range(x.ndim)):
        return x
    src = contiguous_strides(x.shape)
    return _strided(x, tuple(x.shape[a] for a in order), [src[a] for a in order])


def transpose(x: Tensor, axis0: int = -2, axis1: int = -1) -> Tensor:
    a = normalize_axis("transpose", axis0, x.ndim)
    b = normalize_axis("transpose", axis1, x.ndim)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return permute(x, *order)


def narrow(x: Tensor, axis: int, start: int, length: int) -> Tensor:
    """Elements ``start:start+length`` along ``axis``."""
    axis = normalize_axis("narrow", axis, x.ndim)
    n = x.shape[axis]
    if not (0 <= start and 0 <= length and start + length <= n):
        raise ShapeError(f"narrow: [{start}, {start + length}) is outside axis {axis} of {x.shape}")
    strides = contiguous_strides(x.shape)
    shape = x.shape[:axis] + (length,) + x.shape[axis + 1 :]
    return _strided(x, shape, strides, start * strides[axis])


def getitem(x: Tensor, index) -> Tensor:
    """Basic indexing: ints, slices with positive steps, ``...`` and ``None``;
    a 1-D int64 Tensor selects along the first axis."""
    if isinstance(index, Tensor):
        from riftco.tensor.ops.indexing import index_select

        return index_select(x, 0, index)
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(i is Ellipsis for i in items) > 1:
        raise ShapeError("getitem: at most one '...'")
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise ShapeError(f"getitem: {consumed} indices for a {x.ndim}-d tensor {x.shape}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - consumed)
    else:
        items += [slice(None)] * (x.ndim - consumed)
    src = contiguous_strides(x.shape)
    shape, strides, offset, axis = [], [], 0, 0
    for item in items:
        if item is None:
            shape.append(1)
            strides.append(0)
            continue
        n = x.shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step <= 0:
                raise ShapeError(f"getitem: slice steps must be positive, found {item.step}")
            length = max(0, (stop - start + step - 1) // step)
            shape.append(length)
            strides.append(src[axis] * step)
            offset += start * src[axis] if length else 0
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not -n <= item < n:
                raise IndexOutOfRange(
                    f"getitem: index {item} is out of range for axis {axis} of {x.shape}"
                )
            offset += (int(item) % n) * src[axis]
        else:
            raise TypeError(f"getitem: unsupported index {item!r}")
        axis += 1
    return _strided(x, tuple(shape), strides, offset)


def broadcast_to(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    target = _shape_arg("broadcast_to", shape)
    if broadcast_shapes("broadcast_to", x.shape, target) != target:
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {target}")
    if target == x.shape:
        return x
    lead = len(target) - x.ndim
    src = contiguous_strides(x.shape)
    strides = [0] * lead + [0 if d == 1 else s for d, s in zip(x.shape, src)]
    return _strided(x, target, strides)


def sum_to_shape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """Sum ``x`` down to ``shape``, the inverse of broadcasting ``shape`` to ``x.shape``."""
    from riftco.tensor.ops.reduction import sum as reduce_sum

    target = _shape_arg("sum_to_shape", shape)
    if broadcast_shapes("sum_to_shape", target, x.shape) != x.shape:
        raise ShapeError(f"sum_to_shape: {target} does not broadcast to {x.shape}")
    if target == x.shape:
        return x
    lead = x.ndim - len(target)
    axes = list(range(lead)) + [
        lead + i for i, d in enumerate(target) if d == 1 and x.shape[lead + i] != 1
    ]
    out = reduce_sum(x, axis=tuple(axes)) if axes else x
    return reshape(out, target)


def unsqueeze(x: Tensor, axis: int) -> Tensor:
    axis = normalize_axis("unsqueeze", axis, x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(x: Tensor, axis: int | None = None) -> Tensor:
    if axis is None:
        return reshape(x, tuple(d for d in x.shape if d != 1))
    axis = normalize_axis("squeeze", axis, x.ndim)
    if x.shape[axis] != 1:
        raise ShapeError(f"squeeze: axis {axis} of {x.shape} has size {x.shape[axis]}, not 1")
    return reshape(x, x.shape[:axis] + x.shape[axis + 1 :])


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    tensors = [require_tensor("concatenate", t) for t in tensors]
    if not tensors:
        raise ShapeError("concatenate: expected at least one tensor")
    first = tensors[0]
    check_same_backend("concatenate", *tensors)
    if first.ndim == 0:
        raise ShapeError("concatenate: 0-d tensors cannot be concatenated; use stack")
    axis = normalize_axis("concatenate", axis, first.ndim)
    for t in tensors[1:]:
        if t.dtype is not first.dtype:
            from riftco.tensor.errors import DTypeError

            raise DTypeError(f"concatenate: dtypes {first.dtype.value} and {t.dtype.value}")
        if t.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            shapes = ", ".join(str(u.shape) for u in tensors)
            raise ShapeError(f"concatenate: shapes {shapes} differ off axis {axis}")
    if len(tensors) == 1:
        return first
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    data = first.backend.concat(
        [t._data for t in tensors], [t.shape for t in tensors], first.dtype, axis
    )
    return Tensor._wrap(data, tuple(shape), first.dtype, first.backend)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    tensors = [require_tensor("stack", t) for t in tensors]
    if not tensors:
        raise ShapeError("stack: expected at least one tensor")
    if any(t.shape != tensors[0].shape for t in tensors):
        raise ShapeError(f"stack: shapes differ: {', '.join(str(t.shape) for t in tensors)}")
    axis = normalize_axis("stack", axis, tensors[0].ndim + 1)
    return concatenate([unsqueeze(t, axis) for t in tensors], axis)


def astype(x: Tensor, dtype: DType | str) -> Tensor:
    """``x`` with elements of ``dtype``: to bfloat16 the nearest value, ties to even
    (NaN stays NaN, overflow becomes infinity); bfloat16 to float32 exactly."""
    dtype = as_dtype(dtype)
    if dtype is x.dtype:
        return x
    if dtype not in x.backend.dtypes:
        require_dtype_support("astype", x.backend, dtype)
    return Tensor._wrap(
        x.backend.astype(x._data, x.shape, x.dtype, dtype), x.shape, dtype, x.backend
    )


__all__ = [
    "astype",
    "broadcast_to",
    "concatenate",
    "copy",
    "flatten",
    "getitem",
    "narrow",
    "permute",
    "reshape",
    "squeeze",
    "stack",
    "sum_to_shape",
    "transpose",
    "unsqueeze",
]
