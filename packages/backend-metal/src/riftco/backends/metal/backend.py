"""The ``metal`` and ``vulkan`` backends: storages are pooled wgpu buffers, every op
a WGSL compute kernel recorded into the pending batch. The host waits for the
device only in ``to_numpy`` (``.numpy()``, ``.item()``) and where a kernel's
result decides what the op returns (an index check, Adam's finite check).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.metal import elementwise, layout, reductions
from riftco.backends.metal import _native
from riftco.backends.metal.discovery import Adapter
from riftco.backends.metal.runtime import Runtime, Storage
from riftco.tensor import Backend, CapabilityMissing
from riftco.tensor.backend import Shape
from riftco.tensor.dtypes import DType

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION).
API_VERSION = (1, 4)


class WgpuBackend(Backend):
    """One wgpu device: an Apple GPU (``metal``) or a Vulkan adapter (``vulkan``)."""

    api_version = API_VERSION
    #: auto's ranking: above PJRT devices (100), as a dedicated GPU backend.
    priority = 150

    def __init__(self, name: str, device: _native.Device, adapter: Adapter):
        self.name = name
        self.device = device
        self.adapter = adapter
        self.rt = Runtime(device)
        # A software adapter computes on the host CPU: usable by name, never by `auto`.
        self.runs_on_host = adapter.runs_on_host

    def describe(self) -> str:
        return f"wgpu {self.name}: {self.adapter.describe()}"

    def _missing(self, capability: str) -> CapabilityMissing:
        return CapabilityMissing(
            f"{capability!r} is not supported on {self.name}; there is no fallback to the "
            "CPU: move the tensors with .to('cpu') to use it there"
        )

    def synchronize(self) -> None:
        """Wait until every recorded op has run (benchmarks)."""
        self.device.synchronize()

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> Storage:
        from riftco.tensor.dtypes import as_dtype

        return self.rt.upload(array, as_dtype(array.dtype))

    def to_numpy(self, x: Storage, shape: Shape, dtype: DType) -> np.ndarray:
        return layout.to_numpy(self.rt, x, shape)

    def reshape(self, x: Storage, shape: Shape, new_shape: Shape) -> Storage:
        return Storage(x.buffer, x.count, x.dtype)

    def assign(self, dst: Storage, src: Storage, shape: Shape, dtype: DType) -> None:
        if dst.buffer is not src.buffer:
            self.rt.copy(src, dst, dst.count)

    def astype(self, x: Storage, shape: Shape, src: DType, dst: DType) -> Storage:
        return layout.astype(self.rt, x, src, dst)

    # -- layout ---------------------------------------------------------------
    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        return layout.copy_strided(self.rt, x, dtype, out_shape, strides, offset)

    def concat(self, xs: Sequence, shapes, dtype, axis):
        return layout.concat(self.rt, list(xs), list(shapes), dtype, axis)

    # -- elementwise ----------------------------------------------------------
    def unary(self, op, x, shape, dtype):
        return elementwise.unary(self.rt, op, x, dtype)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.binary(self.rt, op, a, a_shape, b, b_shape, out_shape, dtype)

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.compare(self.rt, op, a, a_shape, b, b_shape, out_shape, dtype)

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return elementwise.where(self.rt, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype)

    # -- reductions -----------------------------------------------------------
    def reduce(self, op, x, shape, dtype, axis):
        return reductions.reduce(self.rt, op, x, shape, dtype, axis)

    def argmax(self, x, shape, dtype, axis):
        return reductions.reduce(self.rt, "argmax", x, shape, dtype, axis)

    def softmax(self, x, shape, causal, log):
        return reductions.softmax(self.rt, x, shape, causal, log)
