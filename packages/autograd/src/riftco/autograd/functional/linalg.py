"""Batched matrix multiplication (with transposed operands and broadcast batch axes)."""

from __future__ import annotations

from typing import Any

from riftco.autograd.functional._base import (
    Node,
    Tensor,
    Variable,
    constant,
    result,
    saved_values,
    sum_to,
)
from riftco.autograd.grad_mode import state
from riftco.tensor import ops

__all__ = ["matmul"]


class MatmulNode(Node):
    """out = op(a) @ op(b), op transposing when asked. With G the output gradient:
    d op(a) = G op(b)ᵀ and d op(b) = op(a)ᵀ G, transposed back for transposed operands
    and summed over broadcast batch axes."""

    __slots__ = ("a", "a_shape", "b", "b_shape", "transpose_a", "transpose_b")
    a: Any
    a_shape: Any
    b: Any
    b_shape: Any
    transpose_a: Any
    transpose_b: Any
    op = "matmul"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b, ta, tb = self.a, self.b, self.transpose_a, self.transpose_b
        ga = gb = None
        if self.a_shape is not None:
            if ta:
                ga = ops.matmul(b, g, transpose_a=tb, transpose_b=True)
            else:
                ga = ops.matmul(g, b, transpose_b=not tb)
            ga = sum_to(ga, self.a_shape)
        if self.b_shape is not None:
            if tb:
                gb = ops.matmul(g, a, transpose_a=True, transpose_b=ta)
            else:
                gb = ops.matmul(a, g, transpose_a=not ta)
            gb = sum_to(gb, self.b_shape)
        return ga, gb


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Variable:
    """``a @ b`` over the last two axes, batch axes broadcasting; ``transpose_a`` /
    ``transpose_b`` multiply by an operand's transpose without copying it. 1-D operands
    act as a row (a) or a column (b) vector."""
    if isinstance(a, Variable):
        at, va = a.value, (a if a.requires_grad else None)
    else:
        at, va = a, None
    if isinstance(b, Variable):
        bt, vb = b.value, (b if b.requires_grad else None)
    else:
        bt, vb = b, None
    if (va is None and vb is None) or not state.enabled:
        return constant(ops.matmul(at, bt, transpose_a, transpose_b))
    if isinstance(at, Tensor) and isinstance(bt, Tensor) and (at.ndim == 1 or bt.ndim == 1):
        return _matmul_vectors(a, b, at, bt, transpose_a, transpose_b)
    out = ops.matmul(at, bt, transpose_a, transpose_b)
    node = MatmulNode()
    node.transpose_a, node.transpose_b = bool(transpose_a), bool(transpose_b)
    # Each operand's gradient reads the other operand's value.
    node.a = at if vb is not None else None
    node.b = bt if va is not None else None
    node.a_shape = at.shape if va is not None else None
    node.b_shape = bt.shape if vb is not None else None
    saved = saved_values(a if vb is not None else None, b if va is not None else None)
    return result(out, node, (va, vb), saved)


def _matmul_vectors(a: Any, b: Any, at: Tensor, bt: Tensor, ta: bool, tb: bool) -> Variable:
    """1-D operands through reshapes (which are free), so one node type covers all."""
    from riftco.autograd.functional.layout import reshape

    if at.ndim == 1:
        a, ta = reshape(a, 1, -1), False
    if bt.ndim == 1:
        b, tb = reshape(b, -1, 1), False
    out = matmul(a, b, ta, tb)
    shape = out.shape
    if at.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if bt.ndim == 1:
        shape = shape[:-1]
    return reshape(out, shape)
