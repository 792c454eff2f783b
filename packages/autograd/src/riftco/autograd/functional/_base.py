"""What every operation shares: reading operands, recording a node, making results.

An operand is a Variable, a Tensor or a Python scalar; only Variables that require
gradients are differentiated, everything else is a constant. An operation records
its node only when grad mode is on and some operand requires gradients, so
``no_grad()`` code and constant-only code pay nothing for the graph.
"""

from __future__ import annotations

from typing import Any

from riftco.autograd.graph.node import Node, saved_values
from riftco.autograd.variable import Variable, _make
from riftco.tensor import Tensor

__all__ = [
    "Node",
    "Tensor",
    "Variable",
    "constant",
    "result",
    "saved_values",
    "sum_to",
    "value_of",
]


def value_of(x: Any) -> Any:
    """The tensor (or scalar) an operand stands for."""
    return x.value if isinstance(x, Variable) else x


def constant(value: Tensor) -> Variable:
    """A result without a graph."""
    return _make(value, None)


def result(value: Tensor, node: Node, inputs: tuple, saved: tuple = ()) -> Variable:
    """A result recorded by ``node``, whose gradients flow to ``inputs``."""
    node.inputs = inputs
    node.saved = saved
    v = _new(Variable)  # what _make does, inlined: this runs once per recorded operation
    v.value = value
    v.grad = None
    v.requires_grad = True
    v.name = None
    v._node = node
    v._index = 0
    v._retain = False
    return v


_new = object.__new__


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Undo broadcasting: sum a gradient back down to an operand's shape."""
    return g if g.shape == shape else g.sum_to_shape(shape)
