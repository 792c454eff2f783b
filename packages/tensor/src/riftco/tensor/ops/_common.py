"""Checks shared by every op: backends, dtypes, axes, broadcasting."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import BackendMismatch, DTypeError, ShapeError
from riftco.tensor.strides import contiguous_strides
from riftco.tensor.tensor import Tensor

Shape = tuple[int, ...]

__all__ = [
    "broadcast_shapes",
    "check_same_backend",
    "contiguous_strides",
    "normalize_axis",
    "require_dtype",
    "require_tensor",
    "scalar_like",
]


def check_same_backend(op: str, *tensors: Tensor) -> None:
    first = tensors[0].backend
    for t in tensors[1:]:
        if t.backend is not first and t.backend.name != first.name:
            names = ", ".join(f"{x.backend.name} {x.shape}" for x in tensors)
            raise BackendMismatch(
                f"{op}: operands live on different backends ({names}); move them with .to(name)"
            )


def require_dtype(op: str, t: Tensor, *allowed: DType) -> None:
    if t.dtype not in allowed:
        names = " or ".join(d.value for d in allowed)
        raise DTypeError(f"{op}: expected {names}, found {t.dtype.value} with shape {t.shape}")


def require_tensor(op: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: expected a Tensor, found {type(value).__name__}")
    return value


def normalize_axis(op: str, axis: object, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, found {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for a {ndim}-d tensor")
    return int(axis) % ndim


@lru_cache(maxsize=4096)
def _broadcast(a: Shape, b: Shape) -> Shape | None:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + a
    b = (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    out = shapes[0]
    for s in shapes[1:]:
        merged = _broadcast(out, s)
        if merged is None:
            listed = " and ".join(str(x) for x in shapes)
            raise ShapeError(f"{op}: shapes {listed} do not broadcast")
        out = merged
    return out


_SCALARS: dict[tuple, object] = {}


def scalar_like(op: str, value: object, like: Tensor) -> Tensor:
    """A 0-d tensor holding a Python scalar, in ``like``'s dtype and backend."""
    dtype = like.dtype
    if isinstance(value, bool):
        if dtype is not DType.bool:
            raise DTypeError(f"{op}: a bool scalar with a {dtype.value} tensor")
    elif isinstance(value, (int, np.integer)):
        if dtype is DType.bool:
            raise DTypeError(f"{op}: an int scalar with a bool tensor")
    elif isinstance(value, (float, np.floating)):
        if not dtype.is_floating:
            raise DTypeError(
                f"{op}: a float scalar ({value}) with a {dtype.value} tensor; "
                "convert the tensor with .astype(float32)"
            )
    else:
        raise TypeError(f"{op}: expected a Tensor or a Python scalar, found {type(value).__name__}")
    # Keyed by the backend object itself (not its id, which a new backend may reuse).
    key = (like.backend, dtype, type(value), value)
    data = _SCALARS.get(key)
    if data is None:
        data = like.backend.from_numpy(np.array(value, dtype=dtype.numpy))
        if len(_SCALARS) > 512:
            _SCALARS.clear()
        _SCALARS[key] = data
    return Tensor._wrap(data, (), dtype, like.backend)
