"""The ``NAME`` backend: storages are C-contiguous numpy arrays in host memory (replace
them with the device's buffers), and kernels come from the native module.

Every method receives shapes and dtypes that riftco.tensor has already checked; see
``riftco.tensor.Backend`` for each capability's contract. A capability not overridden
here raises ``CapabilityMissing`` and is absent from ``capabilities()``.
"""

from __future__ import annotations

import numpy as np

from riftco.backends.NAME import _native
from riftco.tensor import Backend
from riftco.tensor.backend import Shape
from riftco.tensor.dtypes import DType

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION).
API_VERSION = (1, 4)


class PLUGINCLASS(Backend):
    name = "NAME"
    api_version = API_VERSION
    #: Compute runs on the host CPU, so ``auto`` never picks it; a device backend sets
    #: False and a priority (higher wins; cpu is 0).
    runs_on_host = True
    priority = 50

    def describe(self) -> str:
        return f"NAME (host memory), native build {_native.BUILD_ID}"

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def to_numpy(self, x: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        view = x.view()
        view.flags.writeable = False
        return view

    def reshape(self, x: np.ndarray, shape: Shape, new_shape: Shape) -> np.ndarray:
        return x.reshape(new_shape)

    def assign(self, dst: np.ndarray, src: np.ndarray, shape: Shape, dtype: DType) -> None:
        np.copyto(dst, src, casting="no")

    def astype(self, x: np.ndarray, shape: Shape, src: DType, dst: DType) -> np.ndarray:
        return x.astype(dst.numpy)

    # -- normalization --------------------------------------------------------
    def softmax(self, x: np.ndarray, shape: Shape, causal: bool, log: bool) -> np.ndarray:
        queries = (shape[-2] if len(shape) >= 2 else 1) if causal else 0
        return _native.softmax(x, queries, log)
