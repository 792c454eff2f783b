"""Shape and layout: reshape and its relatives, permute/transpose, slicing (narrow,
getitem), broadcasting, concatenate/stack, dtype conversion, copies and moves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from riftco.autograd.functional._base import Node, Tensor, Variable, constant, result, value_of
from riftco.autograd.grad_mode import state
from riftco.tensor import Backend, DType, from_numpy, ops, zeros

__all__ = [
    "astype",
    "broadcast_to",
    "concatenate",
    "copy",
    "flatten",
    "getitem",
    "narrow",
    "permute",
    "reshape",
    "squeeze",
    "stack",
    "sum_to_shape",
    "to",
    "transpose",
    "unsqueeze",
]


class _Shaped(Node):
    """``x_shape`` is the operand's shape; ``arg`` what the VJP needs to undo the op."""

    __slots__ = ("arg", "x_shape")
    arg: Any
    x_shape: Any


def _record(kind: type[_Shaped], x: Any, out: Tensor, arg: Any = None) -> Variable:
    if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
        return constant(out)
    node = kind()
    node.x_shape, node.arg = x.value.shape, arg
    return result(out, node, (x,))


class ReshapeNode(_Shaped):
    __slots__ = ()
    op = "reshape"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.reshape(g, self.x_shape),)


def reshape(x: Any, *shape: int | Sequence[int]) -> Variable:
    """The same elements under a new shape (one dim may be -1); never copies."""
    return _record(ReshapeNode, x, ops.reshape(value_of(x), *shape))


def flatten(x: Any) -> Variable:
    return reshape(x, -1)


def unsqueeze(x: Any, axis: int) -> Variable:
    return _record(ReshapeNode, x, ops.unsqueeze(value_of(x), axis))


def squeeze(x: Any, axis: int | None = None) -> Variable:
    return _record(ReshapeNode, x, ops.squeeze(value_of(x), axis))


class PermuteNode(_Shaped):
    """``arg`` is the inverse permutation."""

    __slots__ = ()
    op = "permute"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.permute(g, self.arg),)


def permute(x: Any, *axes: int | Sequence[int]) -> Variable:
    xt = value_of(x)
    out = ops.permute(xt, *axes)
    order: tuple[Any, ...] = (
        tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
    )
    inverse = [0] * len(order)
    for i, a in enumerate(order):
        inverse[int(a) % len(order)] = i
    return _record(PermuteNode, x, out, tuple(inverse))


class TransposeNode(_Shaped):
    __slots__ = ()
    op = "transpose"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.transpose(g, *self.arg),)


def transpose(x: Any, axis0: int = -2, axis1: int = -1) -> Variable:
    return _record(TransposeNode, x, ops.transpose(value_of(x), axis0, axis1), (axis0, axis1))


class NarrowNode(_Shaped):
    """``arg`` is (axis, start, length); the gradient is padded with zeros around."""

    __slots__ = ()
    op = "narrow"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        axis, start, length = self.arg
        full = self.x_shape[axis]
        parts = []
        if start:
            parts.append(_zeros(g, axis, start))
        parts.append(g)
        if start + length < full:
            parts.append(_zeros(g, axis, full - start - length))
        return (ops.concatenate(parts, axis) if len(parts) > 1 else g,)


def _zeros(like: Tensor, axis: int, n: int) -> Tensor:
    shape = (*like.shape[:axis], n, *like.shape[axis + 1 :])
    return zeros(shape, backend=like.backend)


def narrow(x: Any, axis: int, start: int, length: int) -> Variable:
    """Elements ``start:start+length`` along ``axis``."""
    xt = value_of(x)
    out = ops.narrow(xt, axis, start, length)
    return _record(NarrowNode, x, out, (int(axis) % xt.ndim, int(start), int(length)))


class GetitemNode(_Shaped):
    """Basic indexing; ``arg`` is the normalized index. The gradient scatters into a
    zero tensor through the flat positions the index selected (each at most once)."""

    __slots__ = ()
    op = "getitem"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        shape = self.x_shape
        positions = _flat_positions(shape, self.arg)
        size = int(np.prod(shape, dtype=np.int64))
        flat = ops.index_add(
            zeros((size,), backend=g.backend),
            0,
            from_numpy(positions, backend=g.backend),
            ops.reshape(g, -1),
        )
        return (ops.reshape(flat, shape),)


def _flat_positions(shape: tuple[int, ...], index: tuple) -> np.ndarray:
    """Flat offsets (row-major) of the elements ``x[index]`` selects, in output order."""
    items = list(index)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (len(shape) - consumed)
    else:
        items += [slice(None)] * (len(shape) - consumed)
    strides = [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(len(shape))]
    offset, axis, axes_positions = 0, 0, []
    for item in items:
        if item is None:
            axes_positions.append(np.zeros(1, dtype=np.int64))
            continue
        if isinstance(item, slice):
            axes_positions.append(
                np.arange(*item.indices(shape[axis]), dtype=np.int64) * strides[axis]
            )
        else:
            offset += (int(item) % shape[axis]) * strides[axis]
        axis += 1
    flat = np.full((), offset, dtype=np.int64)
    for d, pos in enumerate(axes_positions):
        view = [1] * len(axes_positions)
        view[d] = pos.shape[0]
        flat = flat + pos.reshape(view)
    return np.ascontiguousarray(flat.reshape(-1))


def getitem(x: Any, index: Any) -> Variable:
    """Basic indexing (ints, positive-step slices, ``...``, None); an int64 Tensor (or
    Variable) selects along the first axis."""
    xt = value_of(x)
    if isinstance(index, Variable):
        index = index.value
    out = ops.getitem(xt, index)
    if isinstance(index, Tensor):
        if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
            return constant(out)
        from riftco.autograd.functional.indexing import IndexSelectNode

        node = IndexSelectNode()
        node.x_shape, node.axis, node.indices = xt.shape, 0, index
        return result(out, node, (x,), (None, index, index.version))
    return _record(GetitemNode, x, out, index if isinstance(index, tuple) else (index,))


class BroadcastNode(_Shaped):
    __slots__ = ()
    op = "broadcast_to"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.sum_to_shape(g, self.x_shape),)


def broadcast_to(x: Any, *shape: int | Sequence[int]) -> Variable:
    return _record(BroadcastNode, x, ops.broadcast_to(value_of(x), *shape))


class SumToShapeNode(_Shaped):
    __slots__ = ()
    op = "sum_to_shape"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (ops.broadcast_to(g, self.x_shape),)


def sum_to_shape(x: Any, *shape: int | Sequence[int]) -> Variable:
    """Sum ``x`` down to ``shape``, the inverse of broadcasting ``shape`` to x's shape."""
    return _record(SumToShapeNode, x, ops.sum_to_shape(value_of(x), *shape))


class ConcatenateNode(Node):
    """``sizes`` are the operands' extents along ``axis``."""

    __slots__ = ("axis", "sizes")
    axis: Any
    sizes: Any
    op = "concatenate"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, ...]:
        grads: list[Tensor | None] = []
        start = 0
        for v, n in zip(self.inputs, self.sizes):  # type: ignore[arg-type]
            grads.append(ops.narrow(g, self.axis, start, n) if v is not None else None)
            start += n
        return tuple(grads)


def concatenate(items: Sequence[Any], axis: int = 0) -> Variable:
    values = [value_of(x) for x in items]
    out = ops.concatenate(values, axis)
    targets = tuple(x if isinstance(x, Variable) and x.requires_grad else None for x in items)
    if not state.enabled or all(t is None for t in targets):
        return constant(out)
    node = ConcatenateNode()
    node.axis = int(axis) % out.ndim
    node.sizes = tuple(v.shape[node.axis] for v in values)
    return result(out, node, targets)


class StackNode(Node):
    __slots__ = ("axis",)
    axis: Any
    op = "stack"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, ...]:
        axis = self.axis
        return tuple(
            ops.squeeze(ops.narrow(g, axis, i, 1), axis) if v is not None else None
            for i, v in enumerate(self.inputs)  # type: ignore[arg-type]
        )


def stack(items: Sequence[Any], axis: int = 0) -> Variable:
    """Operands of one shape joined along a new axis."""
    values = [value_of(x) for x in items]
    out = ops.stack(values, axis)
    targets = tuple(x if isinstance(x, Variable) and x.requires_grad else None for x in items)
    if not state.enabled or all(t is None for t in targets):
        return constant(out)
    node = StackNode()
    node.axis = int(axis) % out.ndim
    return result(out, node, targets)


class IdentityNode(_Shaped):
    """Copies and moves: the gradient passes through, moved back to ``arg`` (the
    operand's backend) when the operation changed backends."""

    __slots__ = ()
    op = "copy"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        return (g if self.arg is None else g.to(self.arg),)


class ToNode(IdentityNode):
    __slots__ = ()
    op = "to"


def copy(x: Any) -> Variable:
    """A fresh copy of the value (its own storage)."""
    return _record(IdentityNode, x, ops.copy(value_of(x)))


def to(x: Any, backend: str | Backend) -> Variable:
    """The value on another backend; gradients move back to the operand's backend."""
    xt = value_of(x)
    out = xt.to(backend)
    if out is xt:
        return x if isinstance(x, Variable) else constant(out)
    return _record(ToNode, x, out, xt.backend)


def astype(x: Any, dtype: DType | str) -> Variable:
    """The value converted to ``dtype``; only float32 to float32 keeps a gradient."""
    xt = value_of(x)
    out = ops.astype(xt, dtype)
    if out is xt:
        return x if isinstance(x, Variable) else constant(out)
    return constant(out)
