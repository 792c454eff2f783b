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


class OptimizerConfigError(RiftcoError, ValueError):
    """A setting an optimizer or a schedule cannot take: a learning rate, beta, eps,
    weight decay, clipping threshold or page size out of range (NaN and infinity
    included), a malformed parameter group, a parameter given twice, or a schedule
    (or schedule state dict) that describes no schedule. A ``ValueError`` too."""


class ParameterError(RiftcoError, TypeError):
    """Something given to an optimizer as a parameter or a gradient that is not one
    (no Tensor ``value`` and ``grad``, a gradient that is not a Tensor, parameters
    mixed with group dicts). A ``TypeError`` too."""


__all__ = ["NonFiniteUpdate", "OptimizerConfigError", "OptimizerStateError", "ParameterError"]
