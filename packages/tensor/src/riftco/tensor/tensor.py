"""The Tensor: a shape, a dtype and a backend over a backend-owned storage handle.

Storage is contiguous and row-major. Ops return new tensors; the only in-place
update is ``assign_`` (used by optimizers and caches), which bumps the
tensor's version counter so autograd can detect stale graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from riftco.tensor.backend import Backend, Shape
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError


class Tensor:
    __slots__ = ("__weakref__", "_backend", "_data", "_dtype", "_shape", "_version")
    # numpy scalars on the left of an operator defer to Tensor's reflected methods.
    __array_priority__ = 1000

    _data: Any
    _shape: Shape
    _dtype: DType
    _backend: Backend
    _version: int

    def __init__(
        self, data: Any, dtype: DType | str | None = None, backend: str | Backend | None = None
    ):
        from riftco.tensor.creation import tensor

        made = tensor(data, dtype=dtype, backend=backend)
        self._data, self._shape, self._dtype = made._data, made._shape, made._dtype
        self._backend, self._version = made._backend, 0

    @staticmethod
    def _wrap(data: Any, shape: Shape, dtype: DType, backend: Backend) -> Tensor:
        t = _new(Tensor)
        t._data = data
        t._shape = shape
        t._dtype = dtype
        t._backend = backend
        t._version = 0
        return t

    # -- facts ----------------------------------------------------------------
    @property
    def shape(self) -> Shape:
        return self._shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def device(self) -> str:
        """The backend's registry name."""
        return self._backend.name

    @property
    def version(self) -> int:
        """Incremented by every in-place update (``assign_``)."""
        return self._version

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    def __len__(self) -> int:
        if not self._shape:
            raise ShapeError("len() of a 0-d tensor")
        return self._shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=64, edgeitems=3)
        return f"Tensor({body}, dtype={self._dtype.value}, backend={self._backend.name})"

    __hash__ = object.__hash__

    # -- host access ----------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a read-only numpy array (a view where the backend allows)."""
        return self._backend.to_numpy(self._data, self._shape, self._dtype)

    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ShapeError(f"item: expected a tensor with one element, found shape {self._shape}")
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
        if target is self._backend:
            return self
        host = np.asarray(self.numpy(), order="C")
        return Tensor._wrap(target.from_numpy(host), self._shape, self._dtype, target)

    def assign_(self, value: Tensor) -> Tensor:
        """Overwrite this tensor's values in place and bump its version."""
        from riftco.tensor.ops import check_same_backend

        check_same_backend("assign_", self, value)
        if value._shape != self._shape or value._dtype is not self._dtype:
            raise ShapeError(
                f"assign_: expected {self._shape} {self._dtype.value}, "
                f"found {value._shape} {value._dtype.value}"
            )
        self._backend.assign(self._data, value._data, self._shape, self._dtype)
        self._version += 1
        return self

    def _bump_version(self) -> None:
        """For backends' in-place capabilities (optimizer updates, caches)."""
        self._version += 1


_new = object.__new__


def _install_methods() -> None:
    """Attach the op functions as methods and Python operators."""
    from riftco.tensor import ops

    operand_types = (Tensor, int, float, np.number, np.bool_)

    def forward(fn):
        # Unknown operands (a Variable, say) get NotImplemented, so Python tries
        # their reflected method.
        def method(self, other):
            if not isinstance(other, operand_types):
                return NotImplemented
            return fn(self, other)

        method.__name__ = fn.__name__
        method.__doc__ = fn.__doc__
        return method

    def reflected(fn):
        def method(self, other):
            if not isinstance(other, operand_types):
                return NotImplemented
            return fn(other, self)

        method.__name__ = fn.__name__
        return method

    methods = {
        "reshape": ops.reshape,
        "permute": ops.permute,
        "transpose": ops.transpose,
        "narrow": ops.narrow,
        "broadcast_to": ops.broadcast_to,
        "sum_to_shape": ops.sum_to_shape,
        "unsqueeze": ops.unsqueeze,
        "squeeze": ops.squeeze,
        "flatten": ops.flatten,
        "astype": ops.astype,
        "contiguous_copy": ops.copy,
        "neg": ops.neg,
        "abs": ops.abs,
        "exp": ops.exp,
        "log": ops.log,
        "sqrt": ops.sqrt,
        "rsqrt": ops.rsqrt,
        "tanh": ops.tanh,
        "sigmoid": ops.sigmoid,
        "relu": ops.relu,
        "gelu": ops.gelu,
        "silu": ops.silu,
        "logical_not": ops.logical_not,
        "add": ops.add,
        "sub": ops.sub,
        "mul": ops.mul,
        "div": ops.div,
        "pow": ops.pow,
        "maximum": ops.maximum,
        "minimum": ops.minimum,
        "eq": ops.eq,
        "ne": ops.ne,
        "lt": ops.lt,
        "le": ops.le,
        "gt": ops.gt,
        "ge": ops.ge,
        "logical_and": ops.logical_and,
        "logical_or": ops.logical_or,
        "sum": ops.sum,
        "mean": ops.mean,
        "max": ops.max,
        "min": ops.min,
        "argmax": ops.argmax,
        "sum_squares": ops.sum_squares,
        "matmul": ops.matmul,
        "index_select": ops.index_select,
        "index_add": ops.index_add,
        "gather": ops.gather,
        "scatter_add": ops.scatter_add,
        "softmax": ops.softmax,
        "log_softmax": ops.log_softmax,
        "__getitem__": ops.getitem,
        "__neg__": ops.neg,
        "__abs__": ops.abs,
        "__invert__": ops.logical_not,
        "__add__": forward(ops.add),
        "__sub__": forward(ops.sub),
        "__mul__": forward(ops.mul),
        "__truediv__": forward(ops.div),
        "__pow__": forward(ops.pow),
        "__matmul__": forward(ops.matmul),
        "__radd__": reflected(ops.add),
        "__rsub__": reflected(ops.sub),
        "__rmul__": reflected(ops.mul),
        "__rtruediv__": reflected(ops.div),
        "__rpow__": reflected(ops.pow),
        "__rmatmul__": reflected(ops.matmul),
        "__eq__": forward(ops.eq),
        "__ne__": forward(ops.ne),
        "__lt__": forward(ops.lt),
        "__le__": forward(ops.le),
        "__gt__": forward(ops.gt),
        "__ge__": forward(ops.ge),
        "__and__": forward(ops.logical_and),
        "__or__": forward(ops.logical_or),
    }
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.T = property(lambda self: ops.transpose(self, -2, -1))
