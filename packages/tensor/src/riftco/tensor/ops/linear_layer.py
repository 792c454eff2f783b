"""A linear layer's forward and backward as two ops (``Backend.linear`` and
``Backend.linear_backward``), so a backend can fold the bias and the bias gradient
into its matrix products (fused epilogues). A backend without the kernels gets the
composition of its own ``matmul``, ``binary``, ``astype`` and ``reduce``, the ops a
linear layer ran before: the same bits."""

from __future__ import annotations

from riftco.tensor.dtypes import DType, as_dtype
from riftco.tensor.errors import DTypeError, ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.ops.linalg import matmul
from riftco.tensor.tensor import Tensor

F32 = DType.float32


def _check(op: str, x: Tensor, w: Tensor, bias: Tensor | None) -> tuple[int, int, int]:
    if (  # the common case, checked at once; anything else is named below
        type(x) is Tensor
        and type(w) is Tensor
        and x.dtype is w.dtype
        and x.dtype in (F32, DType.bfloat16)
        and w.backend is x.backend
        and len(x.shape) == 2
        and len(w.shape) == 2
        and x.shape[1] == w.shape[1]
        and (
            bias is None
            or (
                type(bias) is Tensor
                and bias.dtype is F32
                and bias.backend is x.backend
                and bias.shape == (w.shape[0],)
            )
        )
    ):
        return x.shape[0], x.shape[1], w.shape[0]
    require_tensor(op, x)
    require_tensor(op, w)
    check_same_backend(op, x, w, *([] if bias is None else [bias]))
    require_dtype(op, x, F32, DType.bfloat16)
    require_dtype(op, w, x.dtype)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ShapeError(
            f"{op}: expected x [rows, in] and w [out, in], found {x.shape} and {w.shape}"
        )
    if bias is not None:
        require_tensor(op, bias)
        require_dtype(op, bias, F32)
        if bias.shape != (w.shape[0],):
            raise ShapeError(f"{op}: bias must be [{w.shape[0]}], found {bias.shape}")
    return x.shape[0], x.shape[1], w.shape[0]


def _compute(op: str, compute: DType | str | None) -> DType | None:
    low = None if compute is None else as_dtype(compute)
    if low is not None and low not in (F32, DType.bfloat16):
        raise DTypeError(f"{op}: compute dtype is float32 or bfloat16, found {low.value}")
    return None if low is F32 else low


def linear(
    x: Tensor, w: Tensor, bias: Tensor | None = None, *, compute: DType | str | None = None
) -> Tensor:
    """``x @ w.T + bias`` for ``x [rows, in]``, ``w [out, in]`` (both float32 or both
    bfloat16) and a float32 ``bias [out]``: float32 ``[rows, out]``, the product's
    float32 sums with the bias added once (``matmul`` then ``+``: the same bits).
    ``compute="bfloat16"`` multiplies float32 operands as their bfloat16 roundings
    (``x.astype("bfloat16")`` and ``w.astype("bfloat16")``, bit for bit)."""
    rows, _, out = _check("linear", x, w, bias)
    low = _compute("linear", compute)
    backend = x.backend
    if "linear" not in backend.capabilities():
        y = matmul(x, w, transpose_b=True, compute=low)
        return y if bias is None else y + bias
    data = backend.linear(
        x._data, x.shape, w._data, w.shape, None if bias is None else bias._data, low
    )
    return Tensor._wrap(data, (rows, out), F32, backend)


def linear_backward(
    g: Tensor,
    x: Tensor,
    w: Tensor,
    need_x: bool = True,
    need_w: bool = True,
    need_b: bool = True,
    *,
    compute: DType | str | None = None,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The gradients of ``linear(x, w, bias)`` for a float32 ``g [rows, out]``:
    ``dx = gl @ w``, ``dw = gl.T @ x`` (float32 results) with ``gl`` the gradient in
    the products' dtype (rounded once when the operands are bfloat16 or ``compute``
    is bfloat16; float32 operands then read as their roundings), and ``db = g.sum(axis=0)``, the
    column sum of the float32 gradient. Only the parts asked for are computed (None
    for the others). A backend's fused kernel may sum ``db`` in its own order (its
    documented bound); the composition is ``g.sum(axis=0)`` itself."""
    rows, inner, out = _check("linear_backward", x, w, None)
    require_tensor("linear_backward", g)
    check_same_backend("linear_backward", g, x)
    require_dtype("linear_backward", g, F32)
    if g.shape != (rows, out):
        raise ShapeError(f"linear_backward: expected g [{rows}, {out}], found {g.shape}")
    low = _compute("linear_backward", compute)
    if x.dtype is DType.bfloat16:
        low = DType.bfloat16
    backend = x.backend
    if "linear_backward" not in backend.capabilities():
        # bfloat16 operands: the products read the gradient's bfloat16 copy; float32
        # operands: ``matmul``'s compute dtype rounds them all as it reads.
        gl = g.astype(DType.bfloat16) if x.dtype is DType.bfloat16 else g
        dx = matmul(gl, w, compute=low) if need_x else None
        dw = matmul(gl, x, transpose_a=True, compute=low) if need_w else None
        db = g.sum(axis=0) if need_b else None
        return dx, dw, db
    parts = backend.linear_backward(
        g._data,
        x._data,
        x.shape,
        w._data,
        w.shape,
        bool(need_x),
        bool(need_w),
        bool(need_b),
        low,
    )
    shapes = [(rows, inner), (out, inner), (out,)]
    return tuple(  # type: ignore[return-value]
        None if p is None else Tensor._wrap(p, s, F32, backend) for p, s in zip(parts, shapes)
    )


__all__ = ["linear", "linear_backward"]
