"""Reductions (sum, mean, max, min, sum_squares), argmax, softmax and log-softmax."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from riftco.autograd.functional._base import Node, Tensor, Variable, constant, result, value_of
from riftco.autograd.functional.binary import mul
from riftco.autograd.grad_mode import state
from riftco.autograd.variable import Axis
from riftco.tensor import float32, ops

__all__ = ["argmax", "log_softmax", "max", "mean", "min", "softmax", "sum", "sum_squares"]


def _kept_shape(shape: tuple[int, ...], axis: Axis) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The reduced axes (non-negative, sorted) and the result's shape with keepdims.
    Called after the tensor op validated ``axis``."""
    ndim = len(shape)
    if axis is None:
        axes = tuple(range(ndim))
    elif isinstance(axis, Sequence):
        axes = tuple(sorted(int(a) % ndim for a in axis))
    else:
        axes = (int(axis) % ndim,)
    return axes, tuple(1 if i in axes else d for i, d in enumerate(shape))


class _Reduce(Node):
    """``x`` and ``out`` are kept only by the reductions whose VJP reads them; ``kept``
    is the result's shape with the reduced axes kept as 1; ``count`` the number of
    elements reduced into each result."""

    __slots__ = ("axes", "count", "kept", "out", "x", "x_shape")
    axes: Any
    count: Any
    kept: Any
    out: Any
    x: Any
    x_shape: Any
    uses_input = False
    uses_output = False


class SumNode(_Reduce):
    __slots__ = ()
    op = "sum"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.broadcast_to(ops.reshape(g, self.kept), self.x_shape),)


class MeanNode(_Reduce):
    __slots__ = ()
    op = "mean"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        scaled = ops.div(ops.reshape(g, self.kept), float(self.count))
        return (ops.broadcast_to(scaled, self.x_shape),)


class SumSquaresNode(_Reduce):
    __slots__ = ()
    op = "sum_squares"
    uses_input = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.mul(self.x, ops.mul(ops.reshape(g, self.kept), 2.0)),)


class MaxNode(_Reduce):
    """max (and min): the gradient is shared evenly among the elements equal to the result."""

    __slots__ = ()
    op = "max"
    uses_input = True
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        hit = ops.eq(self.x, ops.reshape(self.out, self.kept)).astype(float32)
        count = ops.sum(hit, axis=self.axes, keepdims=True)
        return (ops.mul(hit, ops.div(ops.reshape(g, self.kept), count)),)


class MinNode(MaxNode):
    __slots__ = ()
    op = "min"


def _reduce(kind: type[_Reduce], fn: Any, x: Any, axis: Axis, keepdims: bool) -> Variable:
    xt = x.value if isinstance(x, Variable) else x
    out = fn(xt, axis=axis, keepdims=keepdims)
    if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
        return constant(out)
    node = kind()
    shape = xt.shape
    node.axes, node.kept = _kept_shape(shape, axis)
    count = 1
    for a in node.axes:
        count *= shape[a]
    node.count, node.x_shape = count, shape
    node.x = node.out = None
    saved: tuple = ()
    if kind.uses_input:
        node.x = xt
        saved = (x, xt, xt.version)
    if kind.uses_output:
        node.out = out
        saved += (None, out, out.version)
    return result(out, node, (x,), saved)


def sum(x: Any, axis: Axis = None, keepdims: bool = False) -> Variable:
    return _reduce(SumNode, ops.sum, x, axis, keepdims)


def mean(x: Any, axis: Axis = None, keepdims: bool = False) -> Variable:
    return _reduce(MeanNode, ops.mean, x, axis, keepdims)


def sum_squares(x: Any, axis: Axis = None, keepdims: bool = False) -> Variable:
    """Sum of squares (accumulated in float64 by the kernels)."""
    if (isinstance(axis, (tuple, list)) and not axis) or (axis is None and value_of(x).ndim == 0):
        # Nothing to reduce: riftco.tensor's sum_squares returns x itself here, not x².
        return mul(x, x)
    return _reduce(SumSquaresNode, ops.sum_squares, x, axis, keepdims)


def max(x: Any, axis: Axis = None, keepdims: bool = False) -> Variable:
    """Largest element; tied maxima share the gradient evenly."""
    return _reduce(MaxNode, ops.max, x, axis, keepdims)


def min(x: Any, axis: Axis = None, keepdims: bool = False) -> Variable:
    """Smallest element; tied minima share the gradient evenly."""
    return _reduce(MinNode, ops.min, x, axis, keepdims)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Variable:
    """Index of the first largest element (int64, no gradient)."""
    return constant(ops.argmax(value_of(x), axis=axis, keepdims=keepdims))


class SoftmaxNode(Node):
    __slots__ = ("axis", "causal", "out")
    axis: Any
    causal: Any
    out: Any
    op = "softmax"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        p = self.out
        dot = ops.sum(ops.mul(g, p), axis=self.axis, keepdims=True)
        return (ops.mul(p, ops.sub(g, dot)),)


class LogSoftmaxNode(SoftmaxNode):
    __slots__ = ()
    op = "log_softmax"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        out = self.out
        if self.causal:
            # Masked positions are constant (-inf): no gradient flows through them.
            g = ops.where(ops.gt(out, float("-inf")), g, 0.0)
        total = ops.sum(g, axis=self.axis, keepdims=True)
        return (ops.sub(g, ops.mul(ops.exp(out), total)),)


def _softmax(kind: type[SoftmaxNode], fn: Any, x: Any, axis: int, causal: bool) -> Variable:
    xt = x.value if isinstance(x, Variable) else x
    out = fn(xt, axis=axis, causal=causal)
    if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
        return constant(out)
    node = kind()
    node.axis, node.causal, node.out = axis, causal, out
    return result(out, node, (x,), (None, out, out.version))


def softmax(x: Any, axis: int = -1, causal: bool = False) -> Variable:
    """Softmax along ``axis``; ``causal`` masks future keys of ``[..., t, s]`` scores."""
    return _softmax(SoftmaxNode, ops.softmax, x, axis, causal)


def log_softmax(x: Any, axis: int = -1, causal: bool = False) -> Variable:
    return _softmax(LogSoftmaxNode, ops.log_softmax, x, axis, causal)
