"""Index selection, embedding lookup, gather, and their scatter-add adjoints: the
gradient of a lookup adds each output row back at the index it came from (repeated
indices accumulate)."""

from __future__ import annotations

from typing import Any

from riftco.autograd.functional._base import Node, Tensor, Variable, constant, result, value_of
from riftco.autograd.grad_mode import state
from riftco.tensor import ops, zeros

__all__ = ["embedding", "gather", "index_add", "index_select", "scatter_add"]


class _Indexed(Node):
    """``x_shape`` is the looked-up operand's shape, ``indices`` the int64 index tensor."""

    __slots__ = ("axis", "indices", "x_shape")
    axis: Any
    indices: Any
    x_shape: Any


class IndexSelectNode(_Indexed):
    __slots__ = ()
    op = "index_select"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        base = zeros(self.x_shape, backend=g.backend)
        return (ops.index_add(base, self.axis, self.indices, g),)


class EmbeddingNode(_Indexed):
    """``indices`` are the ids flattened to 1-D."""

    __slots__ = ()
    op = "embedding"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        base = zeros(self.x_shape, backend=g.backend)
        rows = ops.reshape(g, -1, self.x_shape[1])
        return (ops.index_add(base, 0, self.indices, rows),)


class GatherNode(_Indexed):
    __slots__ = ()
    op = "gather"

    def vjp(self, g: Tensor) -> tuple[Tensor]:
        base = zeros(self.x_shape, backend=g.backend)
        return (ops.scatter_add(base, self.axis, self.indices, g),)


def _lookup(kind: type[_Indexed], x: Any, axis: int, indices: Tensor, out: Tensor) -> Variable:
    if not (isinstance(x, Variable) and x.requires_grad and state.enabled):
        return constant(out)
    node = kind()
    xt = x.value
    node.x_shape, node.axis, node.indices = xt.shape, int(axis) % max(xt.ndim, 1), indices
    return result(out, node, (x,), (None, indices, indices.version))


def index_select(x: Any, axis: int, indices: Any) -> Variable:
    """``x`` restricted to ``indices`` (1-D int64) along ``axis``."""
    indices = value_of(indices)
    return _lookup(IndexSelectNode, x, axis, indices, ops.index_select(value_of(x), axis, indices))


def embedding(weight: Any, ids: Any) -> Variable:
    """Rows of ``weight`` [vocab, dim] for int64 ``ids`` of any shape -> [*ids.shape, dim]."""
    ids = value_of(ids)
    out = ops.embedding(value_of(weight), ids)
    return _lookup(EmbeddingNode, weight, 0, ops.reshape(ids, -1), out)


def gather(x: Any, axis: int, indices: Any) -> Variable:
    """``out[..., j, ...] = x[..., indices[..., j, ...], ...]`` along ``axis``."""
    indices = value_of(indices)
    return _lookup(GatherNode, x, axis, indices, ops.gather(value_of(x), axis, indices))


class _Scatter(Node):
    """index_add and scatter_add: the base's gradient passes through; the source's is
    read back from the positions it was added at."""

    __slots__ = ("axis", "indices")
    axis: Any
    indices: Any


class IndexAddNode(_Scatter):
    __slots__ = ()
    op = "index_add"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        base, src = self.inputs  # type: ignore[misc]
        g_src = ops.index_select(g, self.axis, self.indices) if src is not None else None
        return (g if base is not None else None), g_src


class ScatterAddNode(_Scatter):
    __slots__ = ()
    op = "scatter_add"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        base, src = self.inputs  # type: ignore[misc]
        g_src = ops.gather(g, self.axis, self.indices) if src is not None else None
        return (g if base is not None else None), g_src


def _scatter(
    kind: type[_Scatter], fn: Any, base: Any, axis: int, indices: Any, src: Any
) -> Variable:
    indices = value_of(indices)
    bt = value_of(base)
    out = fn(bt, axis, indices, value_of(src))
    targets = tuple(v if isinstance(v, Variable) and v.requires_grad else None for v in (base, src))
    if not state.enabled or (targets[0] is None and targets[1] is None):
        return constant(out)
    node = kind()
    node.axis, node.indices = int(axis) % bt.ndim, indices
    return result(out, node, targets, (None, indices, indices.version))


def index_add(base: Any, axis: int, indices: Any, src: Any) -> Variable:
    """``base`` plus ``src`` added at ``indices`` (1-D int64) along ``axis``."""
    return _scatter(IndexAddNode, ops.index_add, base, axis, indices, src)


def scatter_add(base: Any, axis: int, indices: Any, src: Any) -> Variable:
    """``base`` with ``src`` added at ``indices`` along ``axis`` (the adjoint of gather)."""
    return _scatter(ScatterAddNode, ops.scatter_add, base, axis, indices, src)
