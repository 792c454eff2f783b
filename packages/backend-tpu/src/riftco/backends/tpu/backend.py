"""The ``tpu`` backend: storages are PJRT device buffers, every op a compiled
StableHLO program (written per op and shape by the native module, compiled
once and cached). The host is touched only by ``to_numpy`` and transfers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.tensor import Backend, CapabilityMissing
from riftco.tensor.backend import Shape
from riftco.tensor.dtypes import DType

from . import _native
from .plugin import PluginLocation

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION).
API_VERSION = (1, 0)


class TpuBackend(Backend):
    """Any PJRT plugin: libtpu on a Cloud TPU VM, or the plugin named by RIFTCO_PJRT_PLUGIN."""

    name = "tpu"
    api_version = API_VERSION

    def __init__(self, device: _native.Device, location: PluginLocation):
        self.device = device
        self.location = location
        # A plugin computing on the host's own cores is usable by name, never by `auto`.
        self.runs_on_host = bool(device.is_host)

    def describe(self) -> str:
        major, minor = self.device.api_version
        version = f" {self.device.platform_version}" if self.device.platform_version else ""
        return (
            f"PJRT {self.device.platform}{version}, {self.device.device} "
            f"({self.device.device_count} device(s)), C API {major}.{minor}, "
            f"{self.location.path} from {self.location.source}"
        )

    def _missing(self, capability: str) -> CapabilityMissing:
        return CapabilityMissing(
            f"{capability!r} is not supported on tpu (PJRT platform {self.device.platform}); "
            "there is no fallback to the CPU: move the tensors with .to('cpu') to use it there"
        )

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray):
        return _native.from_numpy(self.device, np.asarray(array, order="C"))

    def to_numpy(self, x, shape: Shape, dtype: DType) -> np.ndarray:
        out = _native.to_numpy(x)
        out.flags.writeable = False
        return out

    def reshape(self, x, shape: Shape, new_shape: Shape):
        return _native.reshape(x, list(new_shape))

    def assign(self, dst, src, shape: Shape, dtype: DType) -> None:
        _native.assign(dst, src)

    def astype(self, x, shape: Shape, src: DType, dst: DType):
        return _native.astype(self.device, x, dst.value)

    # -- layout ---------------------------------------------------------------
    def copy_strided(self, x, shape, dtype, out_shape, strides, offset):
        return _native.copy_strided(self.device, x, list(out_shape), list(strides), offset)

    def concat(self, xs: Sequence, shapes, dtype, axis):
        return _native.concat(self.device, list(xs), axis)

    # -- elementwise ----------------------------------------------------------
    def unary(self, op, x, shape, dtype):
        return _native.unary(self.device, op, x)

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.binary(self.device, op, a, b, list(out_shape))

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.compare(self.device, op, a, b, list(out_shape))

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        return _native.select(self.device, cond, a, b, list(out_shape))

    # -- reductions -----------------------------------------------------------
    def reduce(self, op, x, shape, dtype, axis):
        return _native.reduce(self.device, op, x, axis)

    def argmax(self, x, shape, dtype, axis):
        return _native.argmax(self.device, x, axis)

    # -- linear algebra -------------------------------------------------------
    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        return _native.matmul(self.device, a, b, transpose_a, transpose_b)

    # -- indexing -------------------------------------------------------------
    def index_select(self, x, shape, dtype, axis, indices, count):
        return _native.index_select(self.device, x, axis, indices)

    def index_add(self, base, shape, axis, indices, src, src_shape):
        return _native.index_add(self.device, base, axis, indices, src)

    def gather(self, x, shape, dtype, axis, indices, index_shape):
        return _native.gather(self.device, x, axis, indices)

    def scatter_add(self, base, shape, axis, indices, index_shape, src):
        return _native.scatter_add(self.device, base, axis, indices, src)

    # -- normalization --------------------------------------------------------
    def softmax(self, x, shape, causal, log):
        return _native.softmax(self.device, x, causal, log)
