"""Elementwise functions of one operand: neg, abs, exp, log, sqrt, rsqrt, and the
activations tanh, sigmoid, relu, gelu (exact and tanh) and silu."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from riftco.autograd.functional._base import Node, Tensor, Variable, constant, result
from riftco.autograd.grad_mode import state
from riftco.tensor import float32, ops

__all__ = ["abs", "exp", "gelu", "log", "neg", "relu", "rsqrt", "sigmoid", "silu", "sqrt", "tanh"]


class _Unary(Node):
    """A one-operand node; ``x`` is the operand's value, ``out`` the result, each kept
    only when the VJP reads it."""

    __slots__ = ("out", "x")
    out: Any
    x: Any
    uses_input = False
    uses_output = False


def _apply(kind: type[_Unary], fn: Callable[..., Tensor], x: Any, *args: Any) -> Variable:
    xt = x.value if isinstance(x, Variable) else x
    out = fn(xt, *args)
    if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
        return constant(out)
    node = kind()
    saved: tuple = ()
    node.x = node.out = None
    if kind.uses_input:
        node.x = xt
        saved = (x, xt, xt.version)
    if kind.uses_output:
        node.out = out
        saved += (None, out, out.version)
    return result(out, node, (x,), saved)


class NegNode(_Unary):
    __slots__ = ()
    op = "neg"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.neg(g),)


class AbsNode(_Unary):
    __slots__ = ()
    op = "abs"
    uses_input = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        x = self.x
        sign = ops.sub(ops.gt(x, 0.0).astype(float32), ops.lt(x, 0.0).astype(float32))
        return (ops.mul(g, sign),)


class ExpNode(_Unary):
    __slots__ = ()
    op = "exp"
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.mul(g, self.out),)


class LogNode(_Unary):
    __slots__ = ()
    op = "log"
    uses_input = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.div(g, self.x),)


class SqrtNode(_Unary):
    __slots__ = ()
    op = "sqrt"
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.div(ops.mul(g, 0.5), self.out),)


class RsqrtNode(_Unary):
    __slots__ = ()
    op = "rsqrt"
    uses_input = True
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        # d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 * out / x
        return (ops.mul(g, ops.div(ops.mul(self.out, -0.5), self.x)),)


class TanhNode(_Unary):
    __slots__ = ()
    op = "tanh"
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        out = self.out
        return (ops.sub(g, ops.mul(ops.mul(g, out), out)),)  # g (1 - out²)


class SigmoidNode(_Unary):
    __slots__ = ()
    op = "sigmoid"
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        out = self.out
        return (ops.mul(g, ops.sub(out, ops.mul(out, out))),)  # g out (1 - out)


class ReluNode(_Unary):
    __slots__ = ()
    op = "relu"
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.where(ops.gt(self.out, 0.0), g, 0.0),)


class GeluNode(_Unary):
    """Exact GELU, x Φ(x): d/dx = Φ(x) + x φ(x). riftco.tensor has no erf, so Φ(x)
    is read back from the forward result as gelu(x) / x (and 1/2 at x = 0)."""

    __slots__ = ()
    op = "gelu"
    uses_input = True
    uses_output = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        x, out = self.x, self.out
        tiny = ops.lt(ops.abs(x), 1e-20)
        cdf = ops.where(tiny, 0.5, ops.div(out, ops.where(tiny, 1.0, x)))
        pdf = ops.mul(ops.exp(ops.mul(ops.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
        return (ops.mul(g, ops.add(cdf, ops.mul(x, pdf))),)


_K = math.sqrt(2.0 / math.pi)
_C = 0.044715


class GeluTanhNode(_Unary):
    """GPT-2's GELU, ½x(1 + tanh(k(x + c x³)))."""

    __slots__ = ()
    op = "gelu_tanh"
    uses_input = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        x = self.x
        x2 = ops.mul(x, x)
        t = ops.tanh(ops.mul(ops.mul(x, ops.add(ops.mul(x2, _C), 1.0)), _K))
        dinner = ops.mul(ops.add(ops.mul(x2, 3.0 * _C), 1.0), _K)
        left = ops.mul(ops.add(t, 1.0), 0.5)
        right = ops.mul(ops.mul(ops.mul(x, 0.5), ops.sub(1.0, ops.mul(t, t))), dinner)
        return (ops.mul(g, ops.add(left, right)),)


class SiluNode(_Unary):
    __slots__ = ()
    op = "silu"
    uses_input = True

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        x = self.x
        s = ops.sigmoid(x)
        # d/dx x σ(x) = σ(x) (1 + x (1 - σ(x)))
        return (ops.mul(g, ops.mul(s, ops.add(ops.mul(x, ops.sub(1.0, s)), 1.0))),)


def neg(x: Any) -> Variable:
    return _apply(NegNode, ops.neg, x)


def abs(x: Any) -> Variable:
    """|x|; the gradient at 0 is 0."""
    return _apply(AbsNode, ops.abs, x)


def exp(x: Any) -> Variable:
    return _apply(ExpNode, ops.exp, x)


def log(x: Any) -> Variable:
    return _apply(LogNode, ops.log, x)


def sqrt(x: Any) -> Variable:
    return _apply(SqrtNode, ops.sqrt, x)


def rsqrt(x: Any) -> Variable:
    return _apply(RsqrtNode, ops.rsqrt, x)


def tanh(x: Any) -> Variable:
    return _apply(TanhNode, ops.tanh, x)


def sigmoid(x: Any) -> Variable:
    return _apply(SigmoidNode, ops.sigmoid, x)


def relu(x: Any) -> Variable:
    """max(x, 0); the gradient at 0 is 0."""
    return _apply(ReluNode, ops.relu, x)


def gelu(x: Any, approximate: str = "none") -> Variable:
    """GELU: exact (``approximate="none"``) or GPT-2's tanh form (``"tanh"``)."""
    kind = GeluTanhNode if approximate == "tanh" else GeluNode
    return _apply(kind, ops.gelu, x, approximate)  # ops.gelu validates ``approximate``


def silu(x: Any) -> Variable:
    return _apply(SiluNode, ops.silu, x)
