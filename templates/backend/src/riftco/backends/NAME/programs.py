"""The ``NAME`` backend's compiled kernels: each is compiled once per device, the first
time an op needs it, and reused (a device compiler is slow; an op call must not be)."""

from __future__ import annotations

import threading

from riftco.backends.NAME.device import Device, Kernel
from riftco.tensor.plugin import DType


class ProgramCache:
    """Kernels of one device by (name, element type)."""

    def __init__(self, device: Device):
        self.device = device
        self._kernels: dict[tuple[str, str], Kernel] = {}
        self._lock = threading.Lock()
        #: How many kernels were compiled (a test checks each is compiled once).
        self.compiles = 0

    def kernel(self, name: str, dtype: DType) -> Kernel:
        key = (name, dtype.value)
        found = self._kernels.get(key)
        if found is None:
            with self._lock:
                found = self._kernels.get(key)
                if found is None:
                    found = self._kernels[key] = self.device.compile(name, dtype.value)
                    self.compiles += 1
        return found


__all__ = ["ProgramCache"]
