"""The device the ``NAME`` backend runs on, as the backend sees it: memory and kernels.

``Device`` is everything the backend asks of one: allocate, upload, download, and
compile a kernel by name for an element type. ``HostDevice`` is that over host memory
and the native module's kernels: the device until the real one is wired in
(``_native`` opening the device and compiling its kernels), and afterwards the
emulator CI runs the backend's own ops on (tests/emulator/).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from riftco.backends.NAME import _native
from riftco.tensor.plugin import KernelError

#: A compiled kernel: called with the input memories and its scalar arguments.
Kernel = Callable[..., Any]


class Device(Protocol):
    name: str

    def upload(self, array: np.ndarray) -> Any: ...

    def download(self, memory: Any) -> np.ndarray: ...

    def compile(self, kernel: str, dtype: str) -> Kernel: ...


class HostDevice:
    """Host memory (numpy arrays) and the native module's host kernels."""

    name = "host"

    def upload(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def download(self, memory: np.ndarray) -> np.ndarray:
        return memory

    def compile(self, kernel: str, dtype: str) -> Kernel:
        function = getattr(_native, kernel, None)
        if function is None or dtype != "float32":
            raise KernelError(f"NAME has no {kernel!r} kernel for {dtype}")
        return function


__all__ = ["Device", "HostDevice", "Kernel"]
