"""Activation checkpointing: run a block without keeping its graph, replay it during
backward.

``checkpoint(fn, *inputs)`` runs ``fn`` once with recording on, notes which leaves
(parameters) its result depends on besides ``inputs``, and drops the graph it built,
so none of the block's intermediate values outlive the call. The outputs hang off one
node. During backward that node replays ``fn`` on the saved inputs and runs a nested
VJP over the fresh graph, which stops at the inputs and those leaves and commits
nothing itself: its gradients join the outer backward, which commits them with all
the others. ``fn`` must be deterministic (the same graph on replay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from riftco.autograd.errors import GradientError
from riftco.autograd.grad_mode import enable_grad, state
from riftco.autograd.graph.backward import _propagate
from riftco.autograd.graph.node import Node, saved_values
from riftco.autograd.variable import Variable, _make
from riftco.tensor import Tensor

_PLAIN, _CONSTANT, _DIFFERENTIABLE = 0, 1, 2


class CheckpointNode(Node):
    """``args`` are (kind, value) per positional input; ``captured`` the leaves ``fn``
    reads from outside; ``shapes`` the outputs' shapes (None for outputs without a
    gradient)."""

    __slots__ = ("args", "captured", "fn", "n_outputs", "shapes")
    args: Any
    captured: Any
    fn: Any
    n_outputs: Any
    shapes: Any
    op = "checkpoint"
    multi = True

    def vjp(self, grads: list[Tensor | None]) -> tuple[Tensor | None, ...]:
        proxies = _proxies(self.args)
        with enable_grad():
            outputs, _ = _as_tuple(self.fn(*proxies))
        if len(outputs) != self.n_outputs:
            raise GradientError(
                f"checkpoint: the replay returned {len(outputs)} outputs, the "
                f"forward pass {self.n_outputs}; fn must be deterministic"
            )
        roots, seeds = [], []
        for i, (out, g, shape) in enumerate(zip(outputs, grads, self.shapes)):
            if g is None:
                continue
            if not out.requires_grad or out.value.shape != shape:
                raise GradientError(
                    f"checkpoint: output #{i} of the replay ({out.shape}) "
                    f"differs from the forward pass ({shape}); fn must be "
                    "deterministic"
                )
            roots.append(out)
            seeds.append(g)
        differentiable = [p for p, (kind, _) in zip(proxies, self.args) if kind == _DIFFERENTIABLE]
        targets = differentiable + list(self.captured)
        if not roots:
            return (None,) * len(self.inputs)  # type: ignore[arg-type]
        strays, found, _ = _propagate(roots, seeds, targets, True)
        if strays:
            names = ", ".join(_label(v) for v in strays)
            raise GradientError(
                f"checkpoint: the replay reached {names}, which the forward "
                "pass did not use; fn must be deterministic"
            )
        explicit = iter(found[: len(differentiable)])  # type: ignore[index]
        grads_out: list[Tensor | None] = [
            next(explicit) if kind == _DIFFERENTIABLE else None for kind, _ in self.args
        ]
        return tuple(grads_out) + tuple(found[len(differentiable) :])  # type: ignore[index]


def checkpoint(fn: Callable[..., Any], *inputs: Any) -> Variable | tuple[Variable, ...]:
    """``fn(*inputs)`` without keeping its internal graph; gradients (for ``inputs`` and
    for the parameters ``fn`` uses) equal those of the plain call. ``fn`` returns a
    Variable or a tuple of Variables. Under ``no_grad()`` this is just ``fn(*inputs)``."""
    if not state.enabled:
        return fn(*inputs)
    args = tuple(
        (_DIFFERENTIABLE if x.requires_grad else _CONSTANT, x.value)
        if isinstance(x, Variable)
        else (_PLAIN, x)
        for x in inputs
    )
    proxies = _proxies(args)
    outputs, single = _as_tuple(fn(*proxies))
    proxy_ids = {id(p) for p in proxies if isinstance(p, Variable)}
    captured = _captured_leaves(outputs, proxy_ids)
    targets = tuple(
        x if kind == _DIFFERENTIABLE else None for x, (kind, _) in zip(inputs, args)
    ) + tuple(captured)
    if not any(out.requires_grad for out in outputs) or all(t is None for t in targets):
        plain = tuple(_make(out.value, None) for out in outputs)
        return plain[0] if single else plain
    node = CheckpointNode()
    node.fn, node.args, node.captured = fn, args, tuple(captured)
    node.n_outputs = len(outputs)
    node.shapes = tuple(out.value.shape if out.requires_grad else None for out in outputs)
    node.inputs = targets
    node.saved = saved_values(*[x for x in inputs if isinstance(x, Variable)], *captured)
    results = []
    for i, out in enumerate(outputs):
        if out.requires_grad:
            made = _make(out.value, node)
            made._index = i
        else:
            made = _make(out.value, None)
        results.append(made)
    return results[0] if single else tuple(results)


def _proxies(args: tuple) -> list[Any]:
    """Fresh leaves over the saved input values, so ``fn``'s graph stops at them."""
    return [
        value if kind == _PLAIN else Variable(value, requires_grad=kind == _DIFFERENTIABLE)
        for kind, value in args
    ]


def _as_tuple(out: Any) -> tuple[tuple[Variable, ...], bool]:
    single = not isinstance(out, (tuple, list))
    outputs = (out,) if single else tuple(out)
    for i, o in enumerate(outputs):
        if not isinstance(o, Variable):
            raise TypeError(
                f"checkpoint: fn must return Variables, found {type(o).__name__} as output #{i}"
            )
    return outputs, single


def _captured_leaves(outputs: tuple[Variable, ...], proxy_ids: set[int]) -> list[Variable]:
    """The leaves requiring gradients that the outputs depend on, other than the proxies."""
    found: list[Variable] = []
    found_ids: set[int] = set()
    seen: set[int] = set()
    stack: list[Any] = list(outputs)
    while stack:
        v = stack.pop()
        if v is None or id(v) in proxy_ids or id(v) in found_ids:
            continue
        node = v._node
        if node is None:
            if v.requires_grad:
                found.append(v)
                found_ids.add(id(v))
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.inputs is None:
            raise GradientError(
                f"checkpoint: fn reads a variable whose graph was freed by an "
                f"earlier backward (through {node.op})"
            )
        stack.extend(node.inputs)
    return found


def _label(v: Variable) -> str:
    return f"variable {v.name!r}" if v.name else f"a variable of shape {v.shape}"


__all__ = ["checkpoint"]
