"""The ``cuda`` backend: storages are device memory from the GPU's caching pool
(``_native.Buffer``, tagged with its dtype), every op enqueues CUDA kernels (or
cuBLAS) on the device's one stream, and the host waits only when it reads:
``to_numpy``, an index check, the Adam finiteness flag.

bfloat16 (backend API 1.5) is stored as its bits: matmul and dense attention read
it with float32 arithmetic and float32 results, elementwise ops compute in float32
and round once, layout ops copy it, and the float32-only kernels refuse it with a
``DTypeError`` (``CudaDTypeError``), as the CPU backend does.
"""

from __future__ import annotations

from riftco.backends.cuda import _native
from riftco.backends.cuda.guard import GuardedDevice
from riftco.backends.cuda.libraries import LibrarySearch
from riftco.backends.cuda.ops.attention import AttentionOps
from riftco.backends.cuda.ops.base import BaseOps
from riftco.backends.cuda.ops.decode import DecodeOps
from riftco.backends.cuda.ops.flash import FlashOps
from riftco.backends.cuda.ops.index import IndexOps
from riftco.backends.cuda.ops.launch import Launcher
from riftco.backends.cuda.ops.linear import LinearOps
from riftco.backends.cuda.ops.nn import NnOps
from riftco.backends.cuda.ops.optim import OptimOps
from riftco.backends.cuda.ops.projected import ProjectedOps
from riftco.backends.cuda.ops.quantized import QuantizedOps
from riftco.tensor.plugin import BASE_DTYPES, Backend, DType

#: The backend API this package implements (riftco.tensor's BACKEND_API_VERSION):
#: 1.5's bfloat16 is held (``dtypes``); 1.6's block-layout weights have no kernel here
#: (riftco-tensor's op layer composes them from the ops here, on the device); 1.7's
#: whole-step decoding is a device plan (ops.decode); 1.8's clipped Adam step runs its
#: gradient norm, clip scale and update on the device with one read (ops.optim);
#: 1.9's products in a bfloat16 compute dtype are one cuBLAS call each (ops.base);
#: 1.10's linear layers are cuBLASLt products with the bias (and float32's bias
#: gradient) in their epilogues (ops.linear); 1.11's residual add and layer norm are
#: one kernel (ops.nn); 1.12's bfloat16 attention runs every product on the tensor
#: cores, float32 operands rounded as cuBLAS reads them (ops.attention); 1.13's
#: self-attention through its stacked projections writes and reads the stacked matrix
#: in place (ops.projected); 1.14's layer norm backward with the residual's gradient
#: is one launch (ops.nn); 1.15's mean cross-entropy is one launch each way, the last
#: block to finish taking the mean (ops.nn).
API_VERSION = (1, 15)


class CudaBackend(
    BaseOps,
    LinearOps,
    IndexOps,
    NnOps,
    FlashOps,
    AttentionOps,
    ProjectedOps,
    OptimOps,
    QuantizedOps,
    DecodeOps,
    Backend,
):
    """One NVIDIA GPU through the CUDA driver API, NVRTC-compiled kernels and cuBLAS."""

    name = "cuda"
    api_version = API_VERSION
    runs_on_host = False
    #: auto's ranking among accelerators: a dedicated GPU backend ranks above a
    #: PJRT device (tpu is 100).
    priority = 200
    #: Storage dtypes (API 1.5): the base four and bfloat16.
    dtypes = BASE_DTYPES | {DType.bfloat16}

    def __init__(self, device: _native.Device, libraries: dict[str, LibrarySearch]):
        # Every device call guarded: a sticky error is "device lost" from then on, and
        # RIFTCO_CUDA_SYNC=1 synchronizes after each launch, naming the kernel.
        self.device = GuardedDevice(device)  # type: ignore[assignment]
        self.kernels = Launcher(self.device)
        self.libraries = libraries

    def describe(self) -> str:
        gib = self.device.total_memory / (1 << 30)
        found = ", ".join(
            f"{name} {s.loaded}" for name, s in self.libraries.items() if s.loaded is not None
        )
        return (
            f"CUDA device {self.device.ordinal}: {self.device.name} ({self.device.arch}, "
            f"{gib:.0f} GiB), NVRTC {_native.nvrtc_version()}" + (f"; {found}" if found else "")
        )

    def missing_hint(self, capability: str) -> str:
        return "there is no fallback to the CPU: move the tensors with .to('cpu') to use it there"


__all__ = ["API_VERSION", "CudaBackend"]
