"""Typed errors. Every error riftco-tensor raises is a ``RiftcoError``.

``RiftcoError`` itself lives in riftco-core, the root that packages without numpy
share; it is re-exported here so that ``from riftco.tensor import RiftcoError``
keeps naming the one class.
"""

from __future__ import annotations

from riftco.core.errors import RiftcoError


class ShapeError(RiftcoError, ValueError):
    """Operand shapes that an op cannot accept; the message names the op and the shapes."""


class IndexOutOfRange(ShapeError, IndexError):
    """An integer index outside its axis (an IndexError, so iteration stops)."""


class DTypeError(RiftcoError, TypeError):
    """Operand dtypes that an op cannot accept."""


class BackendMismatch(RiftcoError, ValueError):
    """Operands of one op live on different backends."""


class BackendUnavailable(RiftcoError, RuntimeError):
    """A backend asked for by name cannot be used; the message carries the reason."""


class CapabilityMissing(RiftcoError, NotImplementedError):
    """A backend does not implement a capability an op needs."""


class JobUnsupported(CapabilityMissing):
    """A backend lacks capabilities a job (training, serving, ...) needs, found before the
    job starts; ``backend``, ``job`` and ``missing`` (in CAPABILITIES order) say which."""

    def __init__(self, message: str, *, backend: str, job: str, missing: tuple[str, ...]):
        super().__init__(message)
        self.backend = backend
        self.job = job
        self.missing = missing


class UnknownCapability(RiftcoError, ValueError):
    """A capability name that is not in riftco.tensor.CAPABILITIES."""


class KernelError(RiftcoError, RuntimeError):
    """A native kernel refused its arguments or failed (a Rust panic included)."""


__all__ = [
    "BackendMismatch",
    "BackendUnavailable",
    "CapabilityMissing",
    "DTypeError",
    "IndexOutOfRange",
    "JobUnsupported",
    "KernelError",
    "RiftcoError",
    "ShapeError",
    "UnknownCapability",
]
