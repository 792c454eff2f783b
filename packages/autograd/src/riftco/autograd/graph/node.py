"""The graph node: one recorded operation, its differentiable inputs, and the
values its vector-Jacobian product reads (with the versions they had)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from riftco.autograd.errors import StaleGraphError
from riftco.autograd.variable import Variable
from riftco.tensor import Tensor


class Node:
    """Base class of every recorded operation.

    ``inputs`` lines up with the operation's operands: the Variable when that operand
    needs a gradient, else None. ``saved`` is a flat tuple of ``(owner, tensor, version)``
    triples for every tensor the VJP reads: ``owner`` is the Variable the tensor came
    from (None for constants and outputs), so backward can tell when a saved value was
    updated in place or its variable was given another tensor. Subclasses keep what
    their ``vjp`` needs in their own slots; ``release`` drops it all once backward no
    longer needs the graph (``inputs`` becomes None: the node is freed).
    """

    __slots__ = ("inputs", "saved")

    #: The operation's name, used in error messages.
    op = "op"
    #: True for nodes with several outputs (their ``vjp`` takes a list of gradients).
    multi = False
    _all_slots: tuple[str, ...] = ("inputs", "saved")

    inputs: tuple[Any, ...] | None
    saved: tuple[Any, ...]
    #: How many outputs a ``multi`` node has (set by such nodes).
    n_outputs: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            names.extend(klass.__dict__.get("__slots__", ()))
        cls._all_slots = tuple(n for n in names if n != "__weakref__")

    def vjp(self, grad: Any) -> Sequence[Tensor | None]:
        """Gradients for ``inputs`` (same order, None where not needed) given the
        gradient of the output."""
        raise NotImplementedError(f"{type(self).__name__}.vjp")

    def check_saved(self) -> None:
        """Raise StaleGraphError when a saved value changed since the forward pass."""
        it = iter(self.saved)
        for position, (owner, tensor, version) in enumerate(zip(it, it, it)):
            if tensor.version != version:
                raise StaleGraphError(
                    f"backward: a value saved by {self.op} ({_describe(owner, tensor, position)}) "
                    f"was updated in place after the forward pass (version {version} -> "
                    f"{tensor.version}); run the forward pass again after updating it"
                )
            if owner is not None and owner.value is not tensor:
                now = owner.value
                raise StaleGraphError(
                    f"backward: {_describe(owner, tensor, position)}, saved by {self.op}, now "
                    f"holds another tensor ({now.shape} on {now.backend.name}, was "
                    f"{tensor.shape} on {tensor.backend.name}); run the forward pass again"
                )

    def release(self) -> None:
        """Drop everything the node holds; a later backward through it raises."""
        for name in self._all_slots:
            setattr(self, name, None)


def _describe(owner: Any, tensor: Tensor, position: int) -> str:
    if owner is not None and owner.name:
        return f"variable {owner.name!r} of shape {tensor.shape}"
    kind = "variable" if owner is not None else "tensor"
    return f"saved {kind} #{position} of shape {tensor.shape}"


def saved_values(*operands: Any) -> tuple[Any, ...]:
    """The ``saved`` records for operands (Variables or Tensors; scalars are skipped)."""
    records: tuple[Any, ...] = ()
    for x in operands:
        if isinstance(x, Variable):
            t = x.value
            records += (x, t, t.version)
        elif isinstance(x, Tensor):
            records += (None, x, x.version)
    return records


__all__ = ["Node", "saved_values"]
