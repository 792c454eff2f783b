"""The ``NAME`` backend: storages are ``Buffer`` handles of the device's memory, and each
op runs a kernel from the device's ``ProgramCache`` (compiled once, by name).

Everything it imports from riftco-tensor comes from ``riftco.tensor.plugin``. Every
method receives shapes and dtypes that riftco.tensor has already checked; see
``riftco.tensor.plugin.Backend`` for each capability's contract. A capability not
overridden here raises ``CapabilityMissing`` (with ``missing_hint``'s text) and is
absent from ``capabilities()``. An op with several variants (``unary``, ``binary``,
``reduce``...) looks its kernel up by the op's name in riftco.tensor's vocabulary
(``riftco.tensor.plugin.UNARY`` and the rest), never by a position in a list.
"""

from __future__ import annotations

import numpy as np

from riftco.backends.NAME import _native
from riftco.backends.NAME.device import Device
from riftco.backends.NAME.programs import ProgramCache
from riftco.backends.NAME.storage import Buffer
from riftco.tensor.plugin import Backend, DType, Shape, as_dtype

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION).
API_VERSION = (1, 4)


class PLUGINCLASS(Backend):
    name = "NAME"
    api_version = API_VERSION
    #: Compute runs on the host CPU, so ``auto`` never picks it; a device backend sets
    #: False and a priority (higher wins; cpu is 0).
    runs_on_host = True
    priority = 50

    def __init__(self, device: Device):
        self.device = device
        self.programs = ProgramCache(device)

    def describe(self) -> str:
        return f"NAME on {self.device.name}, native build {_native.BUILD_ID}"

    def missing_hint(self, capability: str) -> str:
        return "there is no fallback to the CPU: move the tensors with .to('cpu') to use it there"

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> Buffer:
        return Buffer(self.device.upload(array), int(array.size), as_dtype(array.dtype))

    def to_numpy(self, x: Buffer, shape: Shape, dtype: DType) -> np.ndarray:
        out = np.asarray(self.device.download(x.memory)).reshape(shape).view()
        out.flags.writeable = False
        return out

    def reshape(self, x: Buffer, shape: Shape, new_shape: Shape) -> Buffer:
        return Buffer(x.memory, x.count, x.dtype)

    def assign(self, dst: Buffer, src: Buffer, shape: Shape, dtype: DType) -> None:
        np.copyto(self.device.download(dst.memory), self.device.download(src.memory))

    def astype(self, x: Buffer, shape: Shape, src: DType, dst: DType) -> Buffer:
        values = np.asarray(self.device.download(x.memory)).astype(dst.numpy)
        return Buffer(self.device.upload(values), x.count, dst)

    # -- normalization --------------------------------------------------------
    def softmax(self, x: Buffer, shape: Shape, causal: bool, log: bool) -> Buffer:
        queries = (shape[-2] if len(shape) >= 2 else 1) if causal else 0
        kernel = self.programs.kernel("softmax", x.dtype)
        values = np.asarray(self.device.download(x.memory)).reshape(shape)
        return Buffer(self.device.upload(kernel(values, queries, log)), x.count, x.dtype)


__all__ = ["API_VERSION", "PLUGINCLASS"]
