"""``custom_gradient``: a result computed outside the recorded operations (a fused or
backend-specific kernel) supplies its own vector-Jacobian product, validated."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from riftco.autograd.errors import GradientError
from riftco.autograd.grad_mode import state
from riftco.autograd.graph.node import Node, saved_values
from riftco.autograd.variable import Variable, _make
from riftco.tensor import Tensor

Vjp = Callable[[Tensor], Sequence[Tensor | None]]
#: The vjp of several results: one gradient per result (None where none arrived).
MultiVjp = Callable[[list[Tensor | None]], Sequence[Tensor | None]]


class CustomNode(Node):
    """``fn`` is the user's VJP; ``specs`` the (shape, dtype, backend name, label) of
    each input, to validate what ``fn`` returns."""

    __slots__ = ("fn", "specs")
    fn: Any
    specs: Any
    op = "custom_gradient"

    def vjp(self, g: Tensor) -> tuple[Tensor | None, ...]:
        grads = self.fn(g)
        specs = self.specs
        if isinstance(grads, (Tensor, Variable)) or not isinstance(grads, (list, tuple)):
            raise GradientError(
                f"custom_gradient: the vjp must return a list or tuple of "
                f"{len(specs)} gradients (Tensor or None), found "
                f"{type(grads).__name__}"
            )
        if len(grads) != len(specs):
            raise GradientError(
                f"custom_gradient: the vjp returned {len(grads)} gradients for {len(specs)} inputs"
            )
        out: list[Tensor | None] = []
        assert self.inputs is not None  # a vjp runs only while its graph is alive
        for i, (grad, (shape, dtype, backend, name), v) in enumerate(
            zip(grads, specs, self.inputs)
        ):
            if grad is None:
                out.append(None)
                continue
            if (
                type(grad) is Tensor
                and grad.shape == shape
                and grad.dtype is dtype
                and grad.backend.name == backend
            ):
                out.append(grad if v is not None else None)
                continue
            label = repr(name) if name else f"shape {shape}"
            if not isinstance(grad, Tensor):
                raise GradientError(
                    f"custom_gradient: gradient #{i} ({label}) must be a Tensor "
                    f"or None, found {type(grad).__name__}"
                )
            if grad.shape != shape:
                raise GradientError(
                    f"custom_gradient: gradient #{i} ({label}) has shape "
                    f"{grad.shape}, expected {shape}"
                )
            if grad.dtype is not dtype:
                raise GradientError(
                    f"custom_gradient: gradient #{i} ({label}) has dtype "
                    f"{grad.dtype.value}, expected {dtype.value}"
                )
            if grad.backend.name != backend:
                raise GradientError(
                    f"custom_gradient: gradient #{i} ({label}) lives on backend "
                    f"{grad.backend.name!r}, expected {backend!r}"
                )
            out.append(grad if v is not None else None)
        return tuple(out)


class CustomMultiNode(CustomNode):
    """A :class:`CustomNode` of several results: ``fn`` takes their gradients."""

    __slots__ = ("n_outputs",)
    n_outputs: Any
    op = "custom_gradients"
    multi = True


def custom_gradient(forward_result: Tensor, inputs: Sequence[Variable], vjp: Vjp) -> Variable:
    """A Variable holding ``forward_result`` whose gradient is supplied by ``vjp``.

    ``vjp(grad)`` receives the gradient with respect to the result (a Tensor of its
    shape) and returns one gradient per input, in order: a Tensor of that input's
    shape, dtype and backend, or None. Anything else raises GradientError naming the
    input. The inputs' values are checked for in-place updates like any saved value,
    since ``vjp`` usually reads them.
    """
    (forward_result,) = _results("custom_gradient", [forward_result])
    node = _node(CustomNode(), "custom_gradient", inputs, vjp)
    return _make(forward_result, node)


def custom_gradients(
    forward_results: Sequence[Tensor], inputs: Sequence[Variable], vjp: MultiVjp
) -> tuple[Variable, ...]:
    """Variables holding ``forward_results`` (several results of one computation)
    whose gradients are supplied together by ``vjp``.

    ``vjp(grads)`` receives one gradient per result, in order (a Tensor of its shape,
    or None for a result no gradient reached), and returns one gradient per input as
    :func:`custom_gradient`'s does, validated the same way. A kernel that takes the
    gradients of all its results at once (a residual sum and the layer norm of it)
    adds them itself instead of leaving the sum to backward."""
    results = _results("custom_gradients", forward_results)
    node = _node(CustomMultiNode(), "custom_gradients", inputs, vjp)
    if node is None:
        return tuple(_make(r, None) for r in results)
    node.n_outputs = len(results)
    made = []
    for i, r in enumerate(results):
        v = _make(r, node)
        v._index = i
        made.append(v)
    return tuple(made)


def _results(op: str, results: Sequence[Any]) -> list[Tensor]:
    out = []
    for i, r in enumerate(results):
        if isinstance(r, Variable):
            r = r.value
        if not isinstance(r, Tensor):
            which = "forward_result" if op == "custom_gradient" else f"forward result #{i}"
            raise TypeError(f"{op}: {which} must be a Tensor, found {type(r).__name__}")
        out.append(r)
    if not out:
        raise TypeError(f"{op}: expected at least one forward result, found none")
    return out


def _node(node: Any, op: str, inputs: Sequence[Variable], vjp: Any) -> Any:
    """``node`` set up over ``inputs`` with ``vjp``, or None when no gradient can flow
    (grad mode off, or no input requires one)."""
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Variable):
            raise TypeError(f"{op}: input #{i} must be a Variable, found {type(x).__name__}")
    if not callable(vjp):
        raise TypeError(f"{op}: vjp must be callable")
    targets = tuple(x if x.requires_grad else None for x in inputs)
    if not state.enabled or all(t is None for t in targets):
        return None
    node.fn = vjp
    # The name goes in as it is; the label is made only for an error's message.
    node.specs = tuple(
        (value.shape, value.dtype, value.backend.name, x.name)
        for x in inputs
        for value in (x.value,)
    )
    node.inputs = targets
    node.saved = saved_values(*inputs)
    return node


__all__ = ["custom_gradient", "custom_gradients"]
