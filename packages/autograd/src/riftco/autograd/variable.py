"""Variable: a tensor value, an optional gradient, and the operation that made it.

Its methods and operators are one-line calls of the differentiable operations of
the same name in ``riftco.autograd.functional``, where each is defined once. They are
the ones riftco.tensor's Tensor offers, listed once in ``riftco.tensor.tensor``'s
``METHOD_OPS`` and ``OPERATOR_OPS`` (the tests check both classes against them).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from riftco.tensor import Backend, DType, DTypeError, Tensor

if TYPE_CHECKING:
    from riftco.autograd.graph.node import Node

Axis = int | Sequence[int] | None


class Variable:
    """A differentiable value.

    ``value`` is the Tensor; ``grad`` the accumulated gradient (a Tensor of the same
    shape and backend, or None); ``requires_grad`` whether gradients flow to it. A
    variable made by an operation on variables that require gradients records the
    operation (its graph node) and requires gradients itself. Leaves keep their
    gradient after ``backward``; intermediates only after ``retain_grad()``.
    """

    __slots__ = (
        "__weakref__",
        "_index",
        "_node",
        "_retain",
        "grad",
        "name",
        "requires_grad",
        "value",
    )
    # numpy scalars on the left of an operator defer to Variable's reflected methods.
    __array_priority__ = 2000

    value: Tensor
    grad: Tensor | None
    requires_grad: bool
    name: str | None
    _node: Node | None
    _index: int
    _retain: bool

    def __init__(self, value: Tensor, requires_grad: bool = False, name: str | None = None):
        if isinstance(value, Variable):
            value = value.value
        if not isinstance(value, Tensor):
            raise TypeError(
                f"Variable: expected a riftco.tensor.Tensor, found {type(value).__name__}"
            )
        if requires_grad and not value.dtype.is_floating:
            raise DTypeError(
                f"Variable {name or ''}: only float32 values can require "
                f"gradients, found {value.dtype.value} with shape {value.shape}"
            )
        self.value = value
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self.name = name
        self._node = None
        self._index = 0
        self._retain = False

    # -- facts ----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> DType:
        return self.value.dtype

    @property
    def backend(self) -> Backend:
        return self.value.backend

    @property
    def device(self) -> str:
        return self.value.backend.name

    @property
    def ndim(self) -> int:
        return len(self.value.shape)

    @property
    def size(self) -> int:
        return self.value.size

    @property
    def is_leaf(self) -> bool:
        """True for variables no recorded operation made (parameters, inputs, constants)."""
        return self._node is None

    def __len__(self) -> int:
        return len(self.value)

    def __iter__(self) -> Iterator[Variable]:
        """The slices along the first axis (each one a recorded ``getitem``)."""
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=64, edgeitems=3)
        extra = f", name={self.name!r}" if self.name else ""
        if self._node is not None:
            extra += f", op={self._node.op}"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return (
            f"{type(self).__name__}({body}, dtype={self.dtype.value}, "
            f"backend={self.backend.name}{extra})"
        )

    __hash__ = object.__hash__

    # -- host access ----------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The value as a read-only numpy array."""
        return self.value.numpy()

    def item(self) -> float | int | bool:
        return self.value.item()

    def tolist(self) -> Any:
        return self.value.tolist()

    def __bool__(self) -> bool:
        return bool(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    # -- graph ----------------------------------------------------------------
    def backward(self, seed: Tensor | None = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into the ``grad`` of every leaf that requires it.

        ``seed`` is the gradient of the final quantity with respect to this variable
        (a Tensor of its shape; omitted for a single-element variable, where it is 1).
        All gradients are committed together at the end: an error leaves every
        ``grad`` unchanged. The graph is freed afterwards unless ``retain_graph``.
        """
        from riftco.autograd.graph.backward import backward

        backward([self], [seed], retain_graph=retain_graph)

    def detach(self) -> Variable:
        """The same value without a graph and without requiring gradients."""
        return Variable(self.value)

    def retain_grad(self) -> Variable:
        """Keep this intermediate's gradient in ``grad`` after backward."""
        if self._node is not None:
            self._retain = True
        return self

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (``grad`` becomes None)."""
        self.grad = None

    def requires_grad_(self, requires_grad: bool = True) -> Variable:
        """Set ``requires_grad`` on a leaf in place; returns itself."""
        if self._node is not None and not requires_grad:
            raise ValueError(
                "requires_grad_: an operation's result always requires gradients; use detach()"
            )
        if requires_grad and not self.value.dtype.is_floating:
            raise DTypeError(
                f"requires_grad_: {self.value.dtype.value} values cannot require gradients"
            )
        self.requires_grad = bool(requires_grad)
        return self

    # -- operations ---------------------------------------------------------------
    def reshape(self, *shape: int | Sequence[int]) -> Variable:
        return F.reshape(self, *shape)

    def permute(self, *axes: int | Sequence[int]) -> Variable:
        return F.permute(self, *axes)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Variable:
        return F.transpose(self, axis0, axis1)

    def narrow(self, axis: int, start: int, length: int) -> Variable:
        return F.narrow(self, axis, start, length)

    def broadcast_to(self, *shape: int | Sequence[int]) -> Variable:
        return F.broadcast_to(self, *shape)

    def sum_to_shape(self, *shape: int | Sequence[int]) -> Variable:
        return F.sum_to_shape(self, *shape)

    def unsqueeze(self, axis: int) -> Variable:
        return F.unsqueeze(self, axis)

    def squeeze(self, axis: int | None = None) -> Variable:
        return F.squeeze(self, axis)

    def flatten(self) -> Variable:
        return F.flatten(self)

    def astype(self, dtype: DType | str) -> Variable:
        return F.astype(self, dtype)

    def copy(self) -> Variable:
        return F.copy(self)

    def to(self, backend: str | Backend) -> Variable:
        return F.to(self, backend)

    def neg(self) -> Variable:
        return F.neg(self)

    def abs(self) -> Variable:
        return F.abs(self)

    def exp(self) -> Variable:
        return F.exp(self)

    def log(self) -> Variable:
        return F.log(self)

    def sqrt(self) -> Variable:
        return F.sqrt(self)

    def rsqrt(self) -> Variable:
        return F.rsqrt(self)

    def tanh(self) -> Variable:
        return F.tanh(self)

    def sigmoid(self) -> Variable:
        return F.sigmoid(self)

    def relu(self) -> Variable:
        return F.relu(self)

    def gelu(self, approximate: str = "none") -> Variable:
        return F.gelu(self, approximate)

    def silu(self) -> Variable:
        return F.silu(self)

    def add(self, b: Any) -> Variable:
        return F.add(self, b)

    def sub(self, b: Any) -> Variable:
        return F.sub(self, b)

    def mul(self, b: Any) -> Variable:
        return F.mul(self, b)

    def div(self, b: Any) -> Variable:
        return F.div(self, b)

    def pow(self, b: Any) -> Variable:
        return F.pow(self, b)

    def maximum(self, b: Any) -> Variable:
        return F.maximum(self, b)

    def minimum(self, b: Any) -> Variable:
        return F.minimum(self, b)

    def eq(self, b: Any) -> Variable:
        return F.eq(self, b)

    def ne(self, b: Any) -> Variable:
        return F.ne(self, b)

    def lt(self, b: Any) -> Variable:
        return F.lt(self, b)

    def le(self, b: Any) -> Variable:
        return F.le(self, b)

    def gt(self, b: Any) -> Variable:
        return F.gt(self, b)

    def ge(self, b: Any) -> Variable:
        return F.ge(self, b)

    def logical_and(self, b: Any) -> Variable:
        return F.logical_and(self, b)

    def logical_or(self, b: Any) -> Variable:
        return F.logical_or(self, b)

    def logical_not(self) -> Variable:
        return F.logical_not(self)

    def sum(self, axis: Axis = None, keepdims: bool = False) -> Variable:
        return F.sum(self, axis, keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Variable:
        return F.mean(self, axis, keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> Variable:
        return F.max(self, axis, keepdims)

    def min(self, axis: Axis = None, keepdims: bool = False) -> Variable:
        return F.min(self, axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Variable:
        return F.argmax(self, axis, keepdims)

    def sum_squares(self, axis: Axis = None, keepdims: bool = False) -> Variable:
        return F.sum_squares(self, axis, keepdims)

    def matmul(self, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Variable:
        return F.matmul(self, b, transpose_a, transpose_b)

    def index_select(self, axis: int, indices: Any) -> Variable:
        return F.index_select(self, axis, indices)

    def index_add(self, axis: int, indices: Any, src: Any) -> Variable:
        return F.index_add(self, axis, indices, src)

    def gather(self, axis: int, indices: Any) -> Variable:
        return F.gather(self, axis, indices)

    def scatter_add(self, axis: int, indices: Any, src: Any) -> Variable:
        return F.scatter_add(self, axis, indices, src)

    def softmax(self, axis: int = -1, causal: bool = False) -> Variable:
        return F.softmax(self, axis, causal)

    def log_softmax(self, axis: int = -1, causal: bool = False) -> Variable:
        return F.log_softmax(self, axis, causal)

    @property
    def T(self) -> Variable:
        return F.transpose(self, -2, -1)

    def __getitem__(self, index: Any) -> Variable:
        return F.getitem(self, index)

    def __neg__(self) -> Variable:
        return F.neg(self)

    def __abs__(self) -> Variable:
        return F.abs(self)

    def __invert__(self) -> Variable:
        return F.logical_not(self)

    def __add__(self, b: Any) -> Variable:
        return F.add(self, b)

    def __sub__(self, b: Any) -> Variable:
        return F.sub(self, b)

    def __mul__(self, b: Any) -> Variable:
        return F.mul(self, b)

    def __truediv__(self, b: Any) -> Variable:
        return F.div(self, b)

    def __pow__(self, b: Any) -> Variable:
        return F.pow(self, b)

    def __matmul__(self, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Variable:
        return F.matmul(self, b, transpose_a, transpose_b)

    def __eq__(self, b: Any) -> Variable:  # type: ignore[override]
        return F.eq(self, b)

    def __ne__(self, b: Any) -> Variable:  # type: ignore[override]
        return F.ne(self, b)

    def __lt__(self, b: Any) -> Variable:
        return F.lt(self, b)

    def __le__(self, b: Any) -> Variable:
        return F.le(self, b)

    def __gt__(self, b: Any) -> Variable:
        return F.gt(self, b)

    def __ge__(self, b: Any) -> Variable:
        return F.ge(self, b)

    def __and__(self, b: Any) -> Variable:
        return F.logical_and(self, b)

    def __or__(self, b: Any) -> Variable:
        return F.logical_or(self, b)

    def __radd__(self, other: Any) -> Variable:
        return F.add(other, self)

    def __rsub__(self, other: Any) -> Variable:
        return F.sub(other, self)

    def __rmul__(self, other: Any) -> Variable:
        return F.mul(other, self)

    def __rtruediv__(self, other: Any) -> Variable:
        return F.div(other, self)

    def __rpow__(self, other: Any) -> Variable:
        return F.pow(other, self)

    def __rmatmul__(self, other: Any) -> Variable:
        return F.matmul(other, self)


#: Bumped whenever a Parameter's value is bound (see `rebind_epoch`).
_REBINDS = [0]
_VALUE_SLOT: Any = Variable.__dict__["value"]  # the slot's descriptor


def rebind_epoch() -> int:
    """A counter that changes whenever any Parameter's ``value`` is bound to a tensor
    (construction included; values written in place do not count): what a compiled
    form of a model that holds its parameters' tensors checks, in one comparison."""
    return _REBINDS[0]


class Parameter(Variable):
    """A trainable leaf: a Variable that requires gradients unless told otherwise."""

    __slots__ = ()

    def __init__(self, value: Tensor, requires_grad: bool = True, name: str | None = None):
        super().__init__(value, requires_grad=requires_grad, name=name)

    @property  # the slot, with every binding counted
    def value(self) -> Tensor:
        return _VALUE_SLOT.__get__(self, Parameter)

    @value.setter
    def value(self, value: Tensor) -> None:
        _VALUE_SLOT.__set__(self, value)
        _REBINDS[0] += 1


def _make(value: Tensor, node: Any) -> Variable:
    """An operation's result: requires gradients exactly when it has a node."""
    v = object.__new__(Variable)
    v.value = value
    v.grad = None
    v.requires_grad = node is not None
    v.name = None
    v._node = node
    v._index = 0
    v._retain = False
    return v


__all__ = ["Parameter", "Variable"]

# The operations need Variable itself, so they come in once the class exists; the
# methods above look them up when called.
from riftco.autograd import functional as F  # noqa: E402
