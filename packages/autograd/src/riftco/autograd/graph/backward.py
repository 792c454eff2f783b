"""Reverse-mode traversal: iterative topological order, staged gradients, one commit.

Backward runs in three phases. Discovery walks the graph from the roots with an
explicit stack (no recursion, so chains of any length work), counts each node's
consumers and checks every saved value's version and identity; a stale graph
raises here, before any VJP runs. Propagation runs VJPs in topological order
(Kahn's algorithm), summing the gradients that meet at a node, and stages the
gradients of leaves and retained intermediates in a dictionary. Commit adds the
staged gradients to ``grad`` only after everything succeeded, so an exception in
any phase leaves every ``grad`` as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from riftco.autograd.errors import GradientError, StaleGraphError
from riftco.autograd.graph.node import Node
from riftco.autograd.variable import Variable
from riftco.tensor import Tensor, ones


def backward(
    roots: Variable | Sequence[Variable],
    seeds: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool = False,
) -> None:
    """Accumulate the gradients of ``roots`` (weighted by ``seeds``, one per root; None
    for a single-element root) into every leaf (and retained intermediate) that
    requires them, all or nothing."""
    roots, seeds = _roots_and_seeds("backward", roots, seeds)
    staged, _, visited = _propagate(roots, seeds, None, True)
    updates = []
    for v, g in staged.items():
        value = v.value
        if g.shape != value.shape or g.backend.name != value.backend.name:
            raise StaleGraphError(
                f"backward: {_name(v)} holds {value.shape} on {value.backend.name} but its "
                f"gradient is {g.shape} on {g.backend.name}; it changed after the forward pass"
            )
        old = v.grad
        updates.append((v, g if old is None else _add_to_grad(v, old, g)))
    for v, g in updates:
        v.grad = g
    if not retain_graph:
        for node in visited:
            node.release()


def grad(
    outputs: Variable | Sequence[Variable],
    inputs: Variable | Sequence[Variable],
    seeds: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool = False,
    allow_unused: bool = True,
) -> list[Tensor | None]:
    """The gradients of ``outputs`` with respect to ``inputs``, returned rather than
    accumulated: no ``grad`` is touched. ``inputs`` may be leaves or intermediates.
    An input the outputs do not depend on gets None (or, with ``allow_unused=False``,
    a GradientError). The graph is freed afterwards unless ``retain_graph``."""
    roots, seed_list = _roots_and_seeds("grad", outputs, seeds)
    targets = [inputs] if isinstance(inputs, Variable) else list(inputs)
    _, found, visited = _propagate(roots, seed_list, targets, allow_unused)
    if not retain_graph:
        for node in visited:
            node.release()
    return found  # type: ignore[return-value]


def _roots_and_seeds(op: str, roots: Any, seeds: Any) -> tuple[list, list]:
    if isinstance(roots, Variable):
        roots = [roots]
        seeds = [seeds]
    roots = list(roots)
    seeds = [None] * len(roots) if seeds is None else list(seeds)
    if len(seeds) != len(roots):
        raise GradientError(f"{op}: {len(seeds)} seeds for {len(roots)} outputs")
    out_roots, out_seeds = [], []
    for root, seed in zip(roots, seeds):
        if not isinstance(root, Variable):
            raise TypeError(f"{op}: expected Variables, found {type(root).__name__}")
        if not root.requires_grad:
            raise GradientError(
                f"{op}: {_name(root)} does not require gradients and has no graph (made under "
                "no_grad(), from detached values, or from constants only)"
            )
        value = root.value
        if seed is None:
            if value.size != 1:
                raise GradientError(
                    f"{op}: {_name(root)} has shape {value.shape}; pass a seed "
                    "(the gradient with respect to it) for a non-scalar"
                )
            seed = ones(value.shape, backend=value.backend)
        else:
            if isinstance(seed, Variable):
                seed = seed.value
            if not isinstance(seed, Tensor):
                raise TypeError(f"{op}: a seed must be a Tensor, found {type(seed).__name__}")
            if (
                seed.shape != value.shape
                or seed.dtype is not value.dtype
                or seed.backend.name != value.backend.name
            ):
                raise GradientError(
                    f"{op}: the seed is {seed.shape} {seed.dtype.value} on {seed.backend.name}, "
                    f"expected {value.shape} {value.dtype.value} on {value.backend.name}"
                )
        out_roots.append(root)
        out_seeds.append(seed)
    return out_roots, out_seeds


def _propagate(
    roots: list[Variable], seeds: list[Tensor], targets: list[Variable] | None, allow_unused: bool
) -> tuple[dict[Variable, Tensor], list | None, list[Node]]:
    """Run the VJPs. Without ``targets``: stage leaf and retained gradients. With
    ``targets``: also return the total gradient reaching each target, in order (leaves
    that are not targets are staged, so a caller can tell they were reached)."""
    wanted: dict[int, int] | None = None
    found: list[Any] | None = None
    if targets is not None:
        wanted = {}
        for i, t in enumerate(targets):
            if not isinstance(t, Variable):
                raise TypeError(f"grad: inputs must be Variables, found {type(t).__name__}")
            wanted.setdefault(id(t), i)
        found = [None] * len(targets)

    # Discovery: consumer counts and saved-value checks, before any VJP runs.
    deps: dict[Node, int] = {}
    stack: list[Node] = []
    for root in roots:
        node = root._node
        if node is not None and node not in deps:
            deps[node] = 0
            stack.append(node)
    visited: list[Node] = []
    while stack:
        node = stack.pop()
        inputs = node.inputs
        if inputs is None:
            raise GradientError(
                f"backward: the graph through {node.op} was freed by an earlier "
                "backward; pass retain_graph=True to the first one"
            )
        if node.saved:
            node.check_saved()
        visited.append(node)
        for v in inputs:
            if v is None:
                continue
            n = v._node
            if n is None:
                continue
            if n in deps:
                deps[n] += 1
            else:
                deps[n] = 1
                stack.append(n)

    # Propagation in topological order.
    staged: dict[Variable, Tensor] = {}
    pending: dict[Node, Any] = {}
    for root, seed in zip(roots, seeds):
        _deliver(root, seed, wanted, found, staged, pending)
    ready = [n for n in deps if deps[n] == 0]
    while ready:
        node = ready.pop()
        g = pending.pop(node, None)
        inputs = node.inputs
        assert inputs is not None  # discovery rejected freed nodes
        if g is None:
            grads: Sequence[Any] = (None,) * len(inputs)
        else:
            grads = node.vjp(g)
            if len(grads) != len(inputs):
                raise GradientError(
                    f"backward: {node.op} returned {len(grads)} gradients for {len(inputs)} inputs"
                )
        for v, gi in zip(inputs, grads):
            if v is None:
                continue
            n = v._node
            if n is None:
                if gi is not None:
                    _deliver(v, gi, wanted, found, staged, pending)
                continue
            if gi is not None:
                if wanted is None and not n.multi and not v._retain:
                    old = pending.get(n)  # the common case of _deliver, inlined
                    pending[n] = gi if old is None else old + gi
                else:
                    _deliver(v, gi, wanted, found, staged, pending)
            left = deps[n] - 1
            deps[n] = left
            if not left:
                ready.append(n)
    if found is not None:
        assert targets is not None and wanted is not None  # found is made for targets
        for i, t in enumerate(targets):
            first = wanted[id(t)]
            if first != i:  # the same variable listed twice
                found[i] = found[first]
    if found is not None and not allow_unused:
        assert targets is not None
        for i, g in enumerate(found):
            if g is None:
                raise GradientError(
                    f"grad: the outputs do not depend on input #{i} ({_name(targets[i])})"
                )
    return staged, found, visited


def _deliver(
    v: Variable,
    g: Tensor,
    wanted: dict[int, int] | None,
    found: list | None,
    staged: dict[Variable, Tensor],
    pending: dict[Node, Any],
) -> None:
    """Add gradient ``g`` arriving at variable ``v`` to wherever it belongs."""
    n = v._node
    if wanted is not None:
        i = wanted.get(id(v))
        if i is not None:
            old = found[i]  # type: ignore[index]
            found[i] = g if old is None else old + g  # type: ignore[index]
            if n is None:
                return
    if n is None:
        if v.requires_grad:
            old = staged.get(v)
            staged[v] = g if old is None else old + g
        return
    if n.multi:
        slots = pending.get(n)
        if slots is None:
            slots = pending[n] = [None] * n.n_outputs
        old = slots[v._index]
        slots[v._index] = g if old is None else old + g
    else:
        old = pending.get(n)
        pending[n] = g if old is None else old + g
    if v._retain and wanted is None:
        old = staged.get(v)
        staged[v] = g if old is None else old + g


def _add_to_grad(v: Variable, old: Tensor, g: Tensor) -> Tensor:
    if old.shape != g.shape or old.backend.name != g.backend.name:
        raise GradientError(
            f"backward: {_name(v)} has a grad of {old.shape} on "
            f"{old.backend.name} that cannot take a {g.shape} gradient on "
            f"{g.backend.name}; call zero_grad() first"
        )
    return old + g


def _name(v: Variable) -> str:
    return f"variable {v.name!r}" if v.name else f"the variable of shape {v.shape}"


__all__ = ["backward", "grad"]
