"""Errors of the PJRT backend."""

from __future__ import annotations

from riftco.tensor.plugin import KernelError


class PjrtError(KernelError):
    """A PJRT plugin refused a program, a buffer or a transfer, a program failed
    on the device, or an operand is outside what the backend supports."""


__all__ = ["PjrtError"]
