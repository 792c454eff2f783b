"""Elementwise ops: unary functions, broadcasting arithmetic, comparisons, where.

bfloat16 operands (on a backend that holds them) compute in float32 and round the
result once to bfloat16."""

from __future__ import annotations

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import DTypeError
from riftco.tensor.ops._common import (
    broadcast_shapes,
    check_same_backend,
    require_dtype,
    scalar_like,
)
from riftco.tensor.tensor import Tensor

F32, I64, BOOL, BF16 = DType.float32, DType.int64, DType.bool, DType.bfloat16
FLOAT = (F32, BF16)


def _unary(op: str, x: Tensor, allowed: tuple[DType, ...] = FLOAT) -> Tensor:
    if x.dtype not in allowed:
        require_dtype(op, x, *allowed)
    return Tensor._wrap(x.backend.unary(op, x._data, x.shape, x.dtype), x.shape, x.dtype, x.backend)


def neg(x: Tensor) -> Tensor:
    return _unary("neg", x, (F32, I64, BF16))


def abs(x: Tensor) -> Tensor:
    return _unary("abs", x, (F32, I64, BF16))


def exp(x: Tensor) -> Tensor:
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    return _unary("log", x)


def sqrt(x: Tensor) -> Tensor:
    return _unary("sqrt", x)


def rsqrt(x: Tensor) -> Tensor:
    return _unary("rsqrt", x)


def tanh(x: Tensor) -> Tensor:
    return _unary("tanh", x)


def sigmoid(x: Tensor) -> Tensor:
    return _unary("sigmoid", x)


def relu(x: Tensor) -> Tensor:
    return _unary("relu", x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact (``approximate="none"``, x Φ(x)) or GPT-2's tanh form (``"tanh"``)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', found {approximate!r}")
    return _unary("gelu" if approximate == "none" else "gelu_tanh", x)


def silu(x: Tensor) -> Tensor:
    return _unary("silu", x)


def logical_not(x: Tensor) -> Tensor:
    return _unary("logical_not", x, (BOOL,))


def _operands(op: str, a: object, b: object) -> tuple[Tensor, Tensor]:
    if type(a) is not Tensor:
        if not isinstance(a, Tensor):
            if not isinstance(b, Tensor):
                raise TypeError(f"{op}: expected at least one Tensor operand")
            a = scalar_like(op, a, b)
    if type(b) is not Tensor and not isinstance(b, Tensor):
        b = scalar_like(op, b, a)
    if a.backend is not b.backend:
        check_same_backend(op, a, b)  # same name after rediscovery is fine
    if a.dtype is not b.dtype:
        raise DTypeError(
            f"{op}: operands have dtypes {a.dtype.value} {a.shape} and "
            f"{b.dtype.value} {b.shape}; convert one with .astype()"
        )
    return a, b


def _binary(op: str, a: object, b: object, allowed: tuple[DType, ...]) -> Tensor:
    # Fast path first: small models spend much of their time in op-call overhead.
    if (
        type(a) is Tensor
        and type(b) is Tensor
        and a.backend is b.backend
        and a.dtype is b.dtype
        and a.dtype in allowed
    ):
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shapes(op, sa, sb)
        data = a.backend.binary(op, a._data, sa, b._data, sb, shape, a.dtype)
        return Tensor._wrap(data, shape, a.dtype, a.backend)
    a, b = _operands(op, a, b)
    if a.dtype not in allowed:
        require_dtype(op, a, *allowed)
    shape = a.shape if a.shape == b.shape else broadcast_shapes(op, a.shape, b.shape)
    data = a.backend.binary(op, a._data, a.shape, b._data, b.shape, shape, a.dtype)
    return Tensor._wrap(data, shape, a.dtype, a.backend)


def add(a, b) -> Tensor:
    return _binary("add", a, b, (F32, I64, BF16))


def sub(a, b) -> Tensor:
    return _binary("sub", a, b, (F32, I64, BF16))


def mul(a, b) -> Tensor:
    return _binary("mul", a, b, (F32, I64, BF16))


def div(a, b) -> Tensor:
    return _binary("div", a, b, FLOAT)


def pow(a, b) -> Tensor:
    return _binary("pow", a, b, FLOAT)


def maximum(a, b) -> Tensor:
    return _binary("maximum", a, b, (F32, I64, BF16))


def minimum(a, b) -> Tensor:
    return _binary("minimum", a, b, (F32, I64, BF16))


def _compare(op: str, a: object, b: object, allowed: tuple[DType, ...]) -> Tensor:
    a, b = _operands(op, a, b)
    if a.dtype not in allowed:
        require_dtype(op, a, *allowed)
    shape = a.shape if a.shape == b.shape else broadcast_shapes(op, a.shape, b.shape)
    data = a.backend.compare(op, a._data, a.shape, b._data, b.shape, shape, a.dtype)
    return Tensor._wrap(data, shape, BOOL, a.backend)


def eq(a, b) -> Tensor:
    return _compare("eq", a, b, (F32, I64, BOOL, BF16))


def ne(a, b) -> Tensor:
    return _compare("ne", a, b, (F32, I64, BOOL, BF16))


def lt(a, b) -> Tensor:
    return _compare("lt", a, b, (F32, I64, BF16))


def le(a, b) -> Tensor:
    return _compare("le", a, b, (F32, I64, BF16))


def gt(a, b) -> Tensor:
    return _compare("gt", a, b, (F32, I64, BF16))


def ge(a, b) -> Tensor:
    return _compare("ge", a, b, (F32, I64, BF16))


def logical_and(a, b) -> Tensor:
    return _compare("logical_and", a, b, (BOOL,))


def logical_or(a, b) -> Tensor:
    return _compare("logical_or", a, b, (BOOL,))


def where(cond: Tensor, a, b) -> Tensor:
    """``a`` where ``cond`` is true, else ``b``; all three broadcast."""
    if not isinstance(cond, Tensor):
        raise TypeError(f"where: cond must be a bool Tensor, found {type(cond).__name__}")
    require_dtype("where", cond, BOOL)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    a, b = _operands("where", a, b)
    check_same_backend("where", cond, a)
    shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
    data = a.backend.where(
        cond._data, cond.shape, a._data, a.shape, b._data, b.shape, shape, a.dtype
    )
    return Tensor._wrap(data, shape, a.dtype, a.backend)


__all__ = [
    "abs",
    "add",
    "div",
    "eq",
    "exp",
    "ge",
    "gelu",
    "gt",
    "le",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "ne",
    "neg",
    "pow",
    "relu",
    "rsqrt",
    "sigmoid",
    "silu",
    "sqrt",
    "sub",
    "tanh",
    "where",
]
