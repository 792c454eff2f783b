"""Storage handles of the ``NAME`` backend: what riftco.tensor holds for each tensor and
hands back to the backend, never looking inside."""

from __future__ import annotations

from typing import Any

from riftco.tensor.plugin import DType


class Buffer:
    """A tensor's elements on the device: the device's allocation (``memory``, opaque
    here) read as ``count`` elements of ``dtype``, C-contiguous. A reshape shares the
    allocation, so an in-place write reaches every view."""

    __slots__ = ("count", "dtype", "memory")

    def __init__(self, memory: Any, count: int, dtype: DType):
        self.memory = memory
        self.count = count
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Buffer({self.count} x {self.dtype.value})"


__all__ = ["Buffer"]
