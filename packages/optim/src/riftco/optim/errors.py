"""Typed errors of riftco-optim (all are ``riftco.tensor.RiftcoError``)."""

from __future__ import annotations

from riftco.tensor import KernelError, RiftcoError


class NonFiniteUpdate(KernelError):
    """A step would have made a parameter or moment non-finite; nothing was changed.

    ``parameter`` is the offending parameter's position in the optimizer (counting
    across groups), or None when the gradient norm itself was not finite.
    """

    def __init__(self, message: str, parameter: int | None = None):
        super().__init__(message)
        self.parameter = parameter


class OptimizerStateError(RiftcoError, ValueError):
    """A state dict that does not fit this optimizer (kind, groups, shapes or values)."""


__all__ = ["NonFiniteUpdate", "OptimizerStateError"]
