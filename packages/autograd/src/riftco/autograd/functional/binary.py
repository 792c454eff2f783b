"""Elementwise operations of two operands with numpy broadcasting (gradients are summed
back to each operand's shape), ``where``, and the comparisons (which have no gradient)."""

from __future__ import annotations

import math
from typing import Any

from riftco.autograd.functional._base import (
    Node,
    Tensor,
    Variable,
    constant,
    result,
    saved_values,
    sum_to,
    value_of,
)
from riftco.autograd.grad_mode import state
from riftco.tensor import float32, ops

__all__ = [
    "add",
    "div",
    "eq",
    "ge",
    "gt",
    "le",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "maximum",
    "minimum",
    "mul",
    "ne",
    "pow",
    "sub",
    "where",
]


def _operands(a: Any, b: Any) -> tuple[Any, Any, Variable | None, Variable | None]:
    if isinstance(a, Variable):
        at, va = a.value, (a if a.requires_grad else None)
    else:
        at, va = a, None
    if isinstance(b, Variable):
        bt, vb = b.value, (b if b.requires_grad else None)
    else:
        bt, vb = b, None
    return at, bt, va, vb


def _shape(t: Any, needed: Variable | None) -> tuple[int, ...] | None:
    return t.shape if needed is not None else None


class _Binary(Node):
    """``a`` and ``b`` hold operand values the VJP reads; the shapes are those of the
    operands that need gradients (None otherwise)."""

    __slots__ = ("a", "a_shape", "b", "b_shape")
    a: Any
    a_shape: Any
    b: Any
    b_shape: Any


class AddNode(_Binary):
    __slots__ = ()
    op = "add"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        ga = sum_to(g, self.a_shape) if self.a_shape is not None else None
        gb = sum_to(g, self.b_shape) if self.b_shape is not None else None
        return ga, gb


class SubNode(_Binary):
    __slots__ = ()
    op = "sub"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        ga = sum_to(g, self.a_shape) if self.a_shape is not None else None
        gb = ops.neg(sum_to(g, self.b_shape)) if self.b_shape is not None else None
        return ga, gb


class MulNode(_Binary):
    __slots__ = ()
    op = "mul"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        ga = sum_to(ops.mul(g, self.b), self.a_shape) if self.a_shape is not None else None
        gb = sum_to(ops.mul(g, self.a), self.b_shape) if self.b_shape is not None else None
        return ga, gb


class DivNode(_Binary):
    """``a`` holds the result a / b (so d/db = -g/b * out)."""

    __slots__ = ()
    op = "div"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        g_over_b = ops.div(g, self.b)
        ga = sum_to(g_over_b, self.a_shape) if self.a_shape is not None else None
        gb = None
        if self.b_shape is not None:
            gb = sum_to(ops.neg(ops.mul(g_over_b, self.a)), self.b_shape)
        return ga, gb


class PowNode(_Binary):
    __slots__ = ("out",)
    out: Any
    op = "pow"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = self.a, self.b
        ga = gb = None
        if self.a_shape is not None:
            b_minus_1 = b - 1.0 if not isinstance(b, Tensor) else ops.sub(b, 1.0)
            ga = sum_to(ops.mul(g, ops.mul(ops.pow(a, b_minus_1), b)), self.a_shape)
        if self.b_shape is not None:
            # d/db a^b = a^b log a, taken as 0 where a == 0 (the limit from a > 0).
            if isinstance(a, Tensor):
                dlog = ops.where(ops.eq(a, 0.0), 0.0, ops.mul(self.out, ops.log(a)))
            else:
                dlog = ops.mul(self.out, _scalar_log(a))
            gb = sum_to(ops.mul(g, dlog), self.b_shape)
        return ga, gb


def _scalar_log(a: float) -> float:
    if a == 0:
        return 0.0
    return math.log(a) if a > 0 else math.nan


class _Extremum(_Binary):
    """maximum / minimum: the gradient goes to the chosen operand; ties split it evenly."""

    __slots__ = ()

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = self.a, self.b
        wins = ops.gt(a, b) if self.op == "maximum" else ops.lt(a, b)
        share = ops.where(ops.eq(a, b), 0.5, wins.astype(float32))
        to_a = ops.mul(g, share)
        ga = sum_to(to_a, self.a_shape) if self.a_shape is not None else None
        gb = sum_to(ops.sub(g, to_a), self.b_shape) if self.b_shape is not None else None
        return ga, gb


class MaximumNode(_Extremum):
    __slots__ = ()
    op = "maximum"


class MinimumNode(_Extremum):
    __slots__ = ()
    op = "minimum"


def add(a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = ops.add(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = AddNode()
    node.a = node.b = None
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    return result(out, node, (va, vb))


def sub(a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = ops.sub(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = SubNode()
    node.a = node.b = None
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    return result(out, node, (va, vb))


def mul(a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = ops.mul(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = MulNode()
    # Each operand's gradient reads the other operand's value.
    node.a = at if vb is not None else None
    node.b = bt if va is not None else None
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    saved = saved_values(a if vb is not None else None, b if va is not None else None)
    return result(out, node, (va, vb), saved)


def div(a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = ops.div(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = DivNode()
    node.a = out if vb is not None else None
    node.b = bt
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    saved = saved_values(b) + ((None, out, out.version) if vb is not None else ())
    return result(out, node, (va, vb), saved)


def pow(a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = ops.pow(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = PowNode()
    node.a, node.b = at, bt
    node.out = out if vb is not None else None
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    saved = saved_values(a, b) + ((None, out, out.version) if vb is not None else ())
    return result(out, node, (va, vb), saved)


def _extremum(kind: type[_Extremum], fn: Any, a: Any, b: Any) -> Variable:
    at, bt, va, vb = _operands(a, b)
    out = fn(at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = kind()
    node.a, node.b = at, bt
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    return result(out, node, (va, vb), saved_values(a, b))


def maximum(a: Any, b: Any) -> Variable:
    return _extremum(MaximumNode, ops.maximum, a, b)


def minimum(a: Any, b: Any) -> Variable:
    return _extremum(MinimumNode, ops.minimum, a, b)


class WhereNode(_Binary):
    """``a`` holds the condition."""

    __slots__ = ()
    op = "where"

    def vjp(self, g: Tensor) -> tuple[None, Tensor | None, Tensor | None]:
        cond = self.a
        ga = sum_to(ops.where(cond, g, 0.0), self.a_shape) if self.a_shape is not None else None
        gb = sum_to(ops.where(cond, 0.0, g), self.b_shape) if self.b_shape is not None else None
        return None, ga, gb


def where(cond: Any, a: Any, b: Any) -> Variable:
    """``a`` where the bool ``cond`` is true, else ``b``; all three broadcast."""
    ct = value_of(cond)
    at, bt, va, vb = _operands(a, b)
    out = ops.where(ct, at, bt)
    if (va is None and vb is None) or not state.enabled:
        return constant(out)
    node = WhereNode()
    node.a, node.b = ct, None
    node.a_shape, node.b_shape = _shape(at, va), _shape(bt, vb)
    return result(out, node, (None, va, vb), saved_values(cond))


def _no_grad(fn: Any) -> Any:
    def op(a: Any, b: Any) -> Variable:
        return constant(fn(value_of(a), value_of(b)))

    op.__name__ = op.__qualname__ = fn.__name__
    op.__doc__ = f"{fn.__name__}, elementwise; a bool result without gradient."
    return op


eq = _no_grad(ops.eq)
ne = _no_grad(ops.ne)
lt = _no_grad(ops.lt)
le = _no_grad(ops.le)
gt = _no_grad(ops.gt)
ge = _no_grad(ops.ge)
logical_and = _no_grad(ops.logical_and)
logical_or = _no_grad(ops.logical_or)


def logical_not(x: Any) -> Variable:
    return constant(ops.logical_not(value_of(x)))
