"""The Tensor: a shape, a dtype and a backend over a backend-owned storage handle.

Storage is contiguous and row-major. Ops return new tensors; in-place updates
(``assign_``, and the ops ``adam_update_`` and ``write_rows_``) bump the tensor's
version counter so autograd can detect stale graphs.

Every method is a one-line call of the op of the same name in ``riftco.tensor.ops``,
where the op is defined once (checks, output allocation, dispatch); the facts
(``shape``, ``dtype``, ``backend``, ``version``) are plain slot attributes, as cheap
to read as any private field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from riftco.tensor.backend import Backend, Shape
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError


class Tensor:
    __slots__ = ("__weakref__", "_data", "backend", "dtype", "shape", "version")
    # numpy scalars on the left of an operator defer to Tensor's reflected methods.
    __array_priority__ = 1000

    _data: Any
    #: The extent of each axis.
    shape: Shape
    dtype: DType
    #: The backend that owns the storage.
    backend: Backend
    #: Incremented by every in-place update; autograd compares it to detect stale graphs.
    #: The in-place ops bump `WRITES` with it (the decode step's own bumps of its
    #: caches aside: a `Decoder` watches weights, never caches).
    version: int

    def __init__(
        self, data: Any, dtype: DType | str | None = None, backend: str | Backend | None = None
    ):
        from riftco.tensor.creation import tensor

        made = tensor(data, dtype=dtype, backend=backend)
        self._data, self.shape, self.dtype = made._data, made.shape, made.dtype
        self.backend, self.version = made.backend, 0

    @staticmethod
    def _wrap(data: Any, shape: Shape, dtype: DType, backend: Backend) -> Tensor:
        t = _new(Tensor)
        t._data = data
        t.shape = shape
        t.dtype = dtype
        t.backend = backend
        t.version = 0
        return t

    # -- facts ----------------------------------------------------------------
    @property
    def device(self) -> str:
        """The backend's registry name."""
        return self.backend.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=64, edgeitems=3)
        return f"Tensor({body}, dtype={self.dtype.value}, backend={self.backend.name})"

    __hash__ = object.__hash__

    # -- host access ----------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a read-only numpy array (a view where the backend allows)."""
        return self.backend.to_numpy(self._data, self.shape, self.dtype)

    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ShapeError(f"item: expected a tensor with one element, found shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def to(self, backend: str | Backend) -> Tensor:
        """This tensor on another backend (through host memory); itself if already there."""
        from riftco.tensor.registry import get_backend

        target = get_backend(backend)
        if target is self.backend:
            return self
        if self.dtype not in target.dtypes:
            from riftco.tensor.backend import require_dtype_support

            require_dtype_support("to", target, self.dtype)
        host = np.asarray(self.numpy(), order="C")
        return Tensor._wrap(target.from_numpy(host), self.shape, self.dtype, target)

    def assign_(self, value: Tensor) -> Tensor:
        """Overwrite this tensor's values in place and bump its version."""
        ops.check_same_backend("assign_", self, value)
        if value.shape != self.shape or value.dtype is not self.dtype:
            raise ShapeError(
                f"assign_: expected {self.shape} {self.dtype.value}, "
                f"found {value.shape} {value.dtype.value}"
            )
        self.backend.assign(self._data, value._data, self.shape, self.dtype)
        self.version += 1
        WRITES[0] += 1
        return self

    # -- layout ---------------------------------------------------------------
    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        return ops.reshape(self, *shape)

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        return ops.permute(self, *axes)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        return ops.transpose(self, axis0, axis1)

    @property
    def T(self) -> Tensor:
        return ops.transpose(self, -2, -1)

    def narrow(self, axis: int, start: int, length: int) -> Tensor:
        return ops.narrow(self, axis, start, length)

    def broadcast_to(self, *shape: int | Sequence[int]) -> Tensor:
        return ops.broadcast_to(self, *shape)

    def sum_to_shape(self, *shape: int | Sequence[int]) -> Tensor:
        return ops.sum_to_shape(self, *shape)

    def unsqueeze(self, axis: int) -> Tensor:
        return ops.unsqueeze(self, axis)

    def squeeze(self, axis: int | None = None) -> Tensor:
        return ops.squeeze(self, axis)

    def flatten(self) -> Tensor:
        return ops.flatten(self)

    def astype(self, dtype: DType | str) -> Tensor:
        return ops.astype(self, dtype)

    def contiguous_copy(self) -> Tensor:
        return ops.copy(self)

    def __getitem__(self, index: Any) -> Tensor:
        return ops.getitem(self, index)

    # -- elementwise ----------------------------------------------------------
    def neg(self) -> Tensor:
        return ops.neg(self)

    def abs(self) -> Tensor:
        return ops.abs(self)

    def exp(self) -> Tensor:
        return ops.exp(self)

    def log(self) -> Tensor:
        return ops.log(self)

    def sqrt(self) -> Tensor:
        return ops.sqrt(self)

    def rsqrt(self) -> Tensor:
        return ops.rsqrt(self)

    def tanh(self) -> Tensor:
        return ops.tanh(self)

    def sigmoid(self) -> Tensor:
        return ops.sigmoid(self)

    def relu(self) -> Tensor:
        return ops.relu(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        return ops.gelu(self, approximate)

    def silu(self) -> Tensor:
        return ops.silu(self)

    def logical_not(self) -> Tensor:
        return ops.logical_not(self)

    def add(self, other: Operand) -> Tensor:
        return ops.add(self, other)

    def sub(self, other: Operand) -> Tensor:
        return ops.sub(self, other)

    def mul(self, other: Operand) -> Tensor:
        return ops.mul(self, other)

    def div(self, other: Operand) -> Tensor:
        return ops.div(self, other)

    def pow(self, other: Operand) -> Tensor:
        return ops.pow(self, other)

    def maximum(self, other: Operand) -> Tensor:
        return ops.maximum(self, other)

    def minimum(self, other: Operand) -> Tensor:
        return ops.minimum(self, other)

    def eq(self, other: Operand) -> Tensor:
        return ops.eq(self, other)

    def ne(self, other: Operand) -> Tensor:
        return ops.ne(self, other)

    def lt(self, other: Operand) -> Tensor:
        return ops.lt(self, other)

    def le(self, other: Operand) -> Tensor:
        return ops.le(self, other)

    def gt(self, other: Operand) -> Tensor:
        return ops.gt(self, other)

    def ge(self, other: Operand) -> Tensor:
        return ops.ge(self, other)

    def logical_and(self, other: Operand) -> Tensor:
        return ops.logical_and(self, other)

    def logical_or(self, other: Operand) -> Tensor:
        return ops.logical_or(self, other)

    # -- reductions, products, indexing ---------------------------------------
    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return ops.sum(self, axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return ops.mean(self, axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return ops.max(self, axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return ops.min(self, axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return ops.argmax(self, axis, keepdims)

    def sum_squares(
        self, axis: int | Sequence[int] | None = None, keepdims: bool = False
    ) -> Tensor:
        return ops.sum_squares(self, axis, keepdims)

    def softmax(self, axis: int = -1, causal: bool = False) -> Tensor:
        return ops.softmax(self, axis, causal)

    def log_softmax(self, axis: int = -1, causal: bool = False) -> Tensor:
        return ops.log_softmax(self, axis, causal)

    def matmul(self, other: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
        return ops.matmul(self, other, transpose_a, transpose_b)

    def index_select(self, axis: int, indices: Tensor) -> Tensor:
        return ops.index_select(self, axis, indices)

    def index_add(self, axis: int, indices: Tensor, src: Tensor) -> Tensor:
        return ops.index_add(self, axis, indices, src)

    def gather(self, axis: int, indices: Tensor) -> Tensor:
        return ops.gather(self, axis, indices)

    def scatter_add(self, axis: int, indices: Tensor, src: Tensor) -> Tensor:
        return ops.scatter_add(self, axis, indices, src)

    # -- operators --------------------------------------------------------------
    # An operand of an unknown type (a Variable, say) gets NotImplemented, so
    # Python tries its reflected method.
    def __neg__(self) -> Tensor:
        return ops.neg(self)

    def __abs__(self) -> Tensor:
        return ops.abs(self)

    def __invert__(self) -> Tensor:
        return ops.logical_not(self)

    def __add__(self, other: object) -> Tensor:
        return ops.add(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __sub__(self, other: object) -> Tensor:
        return ops.sub(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __mul__(self, other: object) -> Tensor:
        return ops.mul(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __truediv__(self, other: object) -> Tensor:
        return ops.div(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __pow__(self, other: object) -> Tensor:
        return ops.pow(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __matmul__(self, other: object) -> Tensor:
        return ops.matmul(self, other) if isinstance(other, Tensor) else NotImplemented

    def __radd__(self, other: object) -> Tensor:
        return ops.add(other, self) if isinstance(other, _OPERANDS) else NotImplemented

    def __rsub__(self, other: object) -> Tensor:
        return ops.sub(other, self) if isinstance(other, _OPERANDS) else NotImplemented

    def __rmul__(self, other: object) -> Tensor:
        return ops.mul(other, self) if isinstance(other, _OPERANDS) else NotImplemented

    def __rtruediv__(self, other: object) -> Tensor:
        return ops.div(other, self) if isinstance(other, _OPERANDS) else NotImplemented

    def __rpow__(self, other: object) -> Tensor:
        return ops.pow(other, self) if isinstance(other, _OPERANDS) else NotImplemented

    def __rmatmul__(self, other: object) -> Tensor:
        return ops.matmul(other, self) if isinstance(other, Tensor) else NotImplemented

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return ops.eq(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return ops.ne(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __lt__(self, other: object) -> Tensor:
        return ops.lt(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __le__(self, other: object) -> Tensor:
        return ops.le(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __gt__(self, other: object) -> Tensor:
        return ops.gt(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __ge__(self, other: object) -> Tensor:
        return ops.ge(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __and__(self, other: object) -> Tensor:
        return ops.logical_and(self, other) if isinstance(other, _OPERANDS) else NotImplemented

    def __or__(self, other: object) -> Tensor:
        return ops.logical_or(self, other) if isinstance(other, _OPERANDS) else NotImplemented


_new = object.__new__

#: In-place writes so far, of any tensor (bumped with each write's `Tensor.version`),
#: so that a holder of many tensors' versions (the whole-step `Decoder`) can tell with
#: one read that none of them moved.
WRITES = [0]
#: What an operator accepts as its other operand.
Operand = Tensor | int | float | np.number | np.bool_
_OPERANDS = (Tensor, int, float, np.number, np.bool_)

#: The ops a Tensor offers as methods of the same name (``t.exp()`` is ``ops.exp(t)``),
#: grouped as above. riftco.autograd's Variable offers each one over the differentiable
#: op of that name; its tests read this table to check both classes, so they cannot drift.
METHOD_OPS: tuple[str, ...] = (
    "reshape", "permute", "transpose", "narrow", "broadcast_to", "sum_to_shape",
    "unsqueeze", "squeeze", "flatten", "astype",
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu",
    "logical_not", "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "sum", "mean", "max", "min", "argmax", "sum_squares", "softmax", "log_softmax",
    "matmul", "index_select", "index_add", "gather", "scatter_add",
)  # fmt: skip

#: The operators (and indexing) of Tensor and Variable, and the op each one calls; a
#: reflected operator (``__radd__``) calls its op with the operands swapped.
OPERATOR_OPS: dict[str, str] = {
    "__getitem__": "getitem", "__neg__": "neg", "__abs__": "abs", "__invert__": "logical_not",
    "__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div",
    "__pow__": "pow", "__matmul__": "matmul",
    "__radd__": "add", "__rsub__": "sub", "__rmul__": "mul", "__rtruediv__": "div",
    "__rpow__": "pow", "__rmatmul__": "matmul",
    "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
    "__ge__": "ge", "__and__": "logical_and", "__or__": "logical_or",
}  # fmt: skip

# The ops module needs Tensor itself, so it comes in once the class exists; the
# methods above look it up when called.
from riftco.tensor import ops  # noqa: E402
