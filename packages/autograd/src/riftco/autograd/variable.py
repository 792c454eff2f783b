"""Variable: a tensor value, an optional gradient, and the operation that made it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from riftco.tensor import Backend, DType, DTypeError, Tensor


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
        return self.value._shape

    @property
    def dtype(self) -> DType:
        return self.value._dtype

    @property
    def backend(self) -> Backend:
        return self.value._backend

    @property
    def device(self) -> str:
        return self.value._backend.name

    @property
    def ndim(self) -> int:
        return len(self.value._shape)

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
            yield self[i]  # type: ignore[index]

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


class Parameter(Variable):
    """A trainable leaf: a Variable that requires gradients unless told otherwise."""

    __slots__ = ()

    def __init__(self, value: Tensor, requires_grad: bool = True, name: str | None = None):
        super().__init__(value, requires_grad=requires_grad, name=name)


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
