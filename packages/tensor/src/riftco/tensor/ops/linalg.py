"""Batched matrix multiplication."""

from __future__ import annotations

from riftco.tensor.backend import composed_capabilities
from riftco.tensor.dtypes import DType, as_dtype
from riftco.tensor.errors import DTypeError, ShapeError
from riftco.tensor.ops._common import (
    broadcast_shapes,
    check_same_backend,
    require_dtype,
    require_tensor,
)
from riftco.tensor.tensor import Tensor

F32 = DType.float32


def matmul(
    a: Tensor,
    b: Tensor,
    transpose_a: bool = False,
    transpose_b: bool = False,
    *,
    compute: DType | str | None = None,
) -> Tensor:
    """``a @ b`` over the last two axes, batch axes broadcasting. ``transpose_a`` /
    ``transpose_b`` multiply by an operand's transpose without copying it.
    1-D operands act as a row (a) or a column (b) vector, as in numpy.

    Two bfloat16 operands multiply with float32 products and sums and give a float32
    result (round it with ``.astype("bfloat16")`` if wanted); a float32 and a bfloat16
    operand do not mix.

    ``compute="bfloat16"`` (API 1.9, ``Backend.matmul_compute``) multiplies two float32
    operands as their bfloat16 roundings, with float32 products and sums: the result
    of ``matmul(a.astype("bfloat16"), b.astype("bfloat16"))`` bit for bit, without the
    two converted copies where the backend has the kernel (a backend without it gets
    exactly that composition, on its device). bfloat16 operands are already rounded
    and ignore it."""
    a, b = require_tensor("matmul", a), require_tensor("matmul", b)
    check_same_backend("matmul", a, b)
    low = None if compute is None else as_dtype(compute)
    if low is F32:
        low = None
    if low is not None and low is not DType.bfloat16:
        raise DTypeError(f"matmul: compute dtype is float32 or bfloat16, found {low.value}")
    if a.dtype is not F32 or b.dtype is not F32:
        require_dtype("matmul", a, F32, DType.bfloat16)
        require_dtype("matmul", b, a.dtype)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: 0-d operand ({a.shape} @ {b.shape})")
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    if squeeze_a:
        a, transpose_a = a.reshape(1, -1), False
    if squeeze_b:
        b, transpose_b = b.reshape(-1, 1), False
    m, k = (a.shape[-1], a.shape[-2]) if transpose_a else a.shape[-2:]
    k2, n = (b.shape[-1], b.shape[-2]) if transpose_b else b.shape[-2:]
    if k != k2:
        raise ShapeError(
            f"matmul: inner dims disagree: {a.shape}{'ᵀ' if transpose_a else ''} @ "
            f"{b.shape}{'ᵀ' if transpose_b else ''} ({k} vs {k2})"
        )
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    backend = a.backend
    if low is None or a.dtype is not F32:
        data = backend.matmul(a._data, a.shape, b._data, b.shape, transpose_a, transpose_b)
    elif "matmul_compute" in composed_capabilities(backend):
        a, b = a.astype(low), b.astype(low)
        data = backend.matmul(a._data, a.shape, b._data, b.shape, transpose_a, transpose_b)
    else:
        data = backend.matmul_compute(
            a._data, a.shape, b._data, b.shape, transpose_a, transpose_b, low
        )
    out = Tensor._wrap(data, (*batch, m, n), DType.float32, a.backend)
    if squeeze_a or squeeze_b:
        shape = batch + ((m,) if not squeeze_a else ()) + ((n,) if not squeeze_b else ())
        out = out.reshape(shape)
    return out


__all__ = [
    "matmul",
]
