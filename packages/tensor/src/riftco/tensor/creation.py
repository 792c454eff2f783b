"""Making tensors: from numpy or nested lists, constants, ranges, seeded random values.

Values are made on the host with numpy and handed to the backend once.
Random tensors use numpy's PCG64 generator, so a seed gives the same values
on every backend and platform.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from riftco.tensor.backend import Backend, require_dtype_support
from riftco.tensor.dtypes import DType, as_dtype
from riftco.tensor.errors import DTypeError
from riftco.tensor.registry import get_backend
from riftco.tensor.tensor import Tensor


def _infer_dtype(array: np.ndarray) -> DType:
    if array.dtype == DType.bfloat16.numpy:
        return DType.bfloat16
    kind = array.dtype.kind
    if kind == "b":
        return DType.bool
    if kind == "u" and array.dtype.itemsize == 1:
        return DType.uint8
    if kind in "iu":
        return DType.int64
    if kind == "f":
        return DType.float32
    raise DTypeError(f"tensor: cannot make a tensor from numpy dtype {array.dtype}")


def from_numpy(
    array: np.ndarray, dtype: DType | str | None = None, backend: str | Backend | None = None
) -> Tensor:
    """A tensor holding a copy of ``array`` (float64 becomes float32 unless told otherwise;
    an ``ml_dtypes.bfloat16`` array is bfloat16, and ``dtype="bfloat16"`` rounds other
    values to the nearest bfloat16, ties to even)."""
    array = np.asarray(array)
    target = _infer_dtype(array) if dtype is None else as_dtype(dtype)
    chosen = get_backend(backend)
    if target not in chosen.dtypes:
        require_dtype_support("from_numpy", chosen, target)
    # ml_dtypes flags every NaN it rounds as an invalid cast; NaN stays NaN, as it should.
    with np.errstate(invalid="ignore"):
        host = np.asarray(array, dtype=target.numpy, order="C")
    return Tensor._wrap(chosen.from_numpy(host), tuple(host.shape), target, chosen)


def tensor(
    data: Any, dtype: DType | str | None = None, backend: str | Backend | None = None
) -> Tensor:
    """A tensor from nested lists, scalars, numpy arrays or another Tensor (copied)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    try:
        array = np.asarray(data)
    except ValueError as exc:
        raise DTypeError(f"tensor: cannot make a regular array from the data ({exc})") from None
    if array.dtype == object:
        raise DTypeError("tensor: ragged or non-numeric data")
    return from_numpy(array, dtype, backend)


def _shape(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(d) for d in shape)


def full(
    shape: Sequence[int],
    value: float | int | bool,
    dtype: DType | str = DType.float32,
    backend: str | Backend | None = None,
) -> Tensor:
    dtype = as_dtype(dtype)
    return from_numpy(np.full(_shape((shape,)), value, dtype=dtype.numpy), dtype, backend)


def zeros(
    *shape: int | Sequence[int],
    dtype: DType | str = DType.float32,
    backend: str | Backend | None = None,
) -> Tensor:
    return full(_shape(shape), 0, dtype, backend)


def ones(
    *shape: int | Sequence[int],
    dtype: DType | str = DType.float32,
    backend: str | Backend | None = None,
) -> Tensor:
    return full(_shape(shape), 1, dtype, backend)


def zeros_like(x: Tensor) -> Tensor:
    return full(x.shape, 0, x.dtype, x.backend)


def ones_like(x: Tensor) -> Tensor:
    return full(x.shape, 1, x.dtype, x.backend)


def arange(
    start: int | float,
    stop: int | float | None = None,
    step: int | float = 1,
    dtype: DType | str | None = None,
    backend: str | Backend | None = None,
) -> Tensor:
    """Like numpy.arange; int64 for int arguments, float32 otherwise."""
    if stop is None:
        start, stop = 0, start
    values = np.arange(start, stop, step)
    return from_numpy(values, dtype, backend)


def uniform(
    shape: Sequence[int],
    low: float = 0.0,
    high: float = 1.0,
    seed: int = 0,
    backend: str | Backend | None = None,
) -> Tensor:
    """float32 values drawn uniformly from [low, high) by PCG64(seed)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return from_numpy(rng.uniform(low, high, size=_shape((shape,))), DType.float32, backend)


def normal(
    shape: Sequence[int],
    mean: float = 0.0,
    std: float = 1.0,
    seed: int = 0,
    backend: str | Backend | None = None,
) -> Tensor:
    """float32 values drawn from N(mean, std²) by PCG64(seed)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return from_numpy(rng.normal(mean, std, size=_shape((shape,))), DType.float32, backend)
