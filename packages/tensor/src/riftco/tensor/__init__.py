"""riftco.tensor: tensors over pluggable backends, with the Rust CPU backend built in.

>>> import riftco.tensor as rt
>>> x = rt.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> (x @ x).softmax().numpy()
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.tensor import _native

if _native.__version__ != __version__:
    raise ImportError(
        f"riftco.tensor {__version__} found its native module at version {_native.__version__} "
        f"({_native.__file__}); reinstall riftco-tensor so both come from one build"
    )

from riftco.tensor import ops
from riftco.tensor.backend import (
    BACKEND_API_VERSION,
    BASE_CAPABILITIES,
    BASE_DTYPES,
    CAPABILITIES,
    COMPOSED,
    Backend,
    composed_capabilities,
)
from riftco.tensor.creation import (
    arange,
    from_numpy,
    full,
    normal,
    ones,
    ones_like,
    tensor,
    uniform,
    zeros,
    zeros_like,
)
from riftco.tensor.dtypes import DType, as_dtype, bfloat16, bool_, float32, int64, uint8
from riftco.tensor.errors import (
    BackendMismatch,
    BackendUnavailable,
    CapabilityMissing,
    DTypeError,
    JobUnsupported,
    KernelError,
    RiftcoError,
    ShapeError,
    UnknownCapability,
)
from riftco.tensor.ops.blockquant import *  # noqa: F403
from riftco.tensor.ops.decode import *  # noqa: F403
from riftco.tensor.ops.elementwise import *  # noqa: F403
from riftco.tensor.ops.fused import *  # noqa: F403
from riftco.tensor.ops.indexing import *  # noqa: F403
from riftco.tensor.ops.inplace import *  # noqa: F403
from riftco.tensor.ops.layout import *  # noqa: F403
from riftco.tensor.ops.linalg import *  # noqa: F403
from riftco.tensor.ops.linear_layer import *  # noqa: F403
from riftco.tensor.ops.paged import *  # noqa: F403
from riftco.tensor.ops.projected import *  # noqa: F403
from riftco.tensor.ops.quantized import *  # noqa: F403
from riftco.tensor.ops.reduction import *  # noqa: F403
from riftco.tensor.registry import (
    BackendInfo,
    backends,
    get_backend,
    require_capabilities,
    reset_discovery,
)
from riftco.tensor.tensor import Tensor


def native_build_id() -> str:
    """The build id of the compiled kernels (checked against the wheelhouse)."""
    return _native.BUILD_ID


def set_num_threads(threads: int) -> None:
    """Threads the CPU kernels use (results are identical for every count)."""
    if threads < 1:
        raise ValueError(f"set_num_threads: expected a positive count, found {threads}")
    _native.set_num_threads(threads)


def get_num_threads() -> int:
    return _native.num_threads()


def cpu_isa() -> str:
    """The vector level the CPU kernels use: ``portable``, ``avx2``, ``avx512`` or
    ``avx512-vnni`` (the widest the CPU has, unless ``RIFTCO_CPU_ISA`` or
    :func:`set_cpu_isa` lowered it)."""
    return _native.cpu_isa()


def cpu_isa_detected() -> str:
    """The widest vector level this CPU has."""
    return _native.cpu_isa_detected()


def set_cpu_isa(name: str) -> str:
    """Cap the CPU kernels' vector level at ``name`` (never above what the CPU
    has) and return the level now in use; for tests and benchmarks of each path."""
    return _native.set_cpu_isa(name)


__all__ = [
    "BACKEND_API_VERSION",
    "BASE_DTYPES",
    "CAPABILITIES",
    "COMPOSED",
    "Backend",
    "BackendInfo",
    "BackendMismatch",
    "BackendUnavailable",
    "CapabilityMissing",
    "DType",
    "DTypeError",
    "KernelError",
    "RiftcoError",
    "ShapeError",
    "Tensor",
    "arange",
    "as_dtype",
    "backends",
    "bfloat16",
    "bool_",
    "cpu_isa",
    "cpu_isa_detected",
    "float32",
    "from_numpy",
    "full",
    "get_backend",
    "get_num_threads",
    "int64",
    "native_build_id",
    "normal",
    "ones",
    "ones_like",
    "ops",
    "reset_discovery",
    "set_cpu_isa",
    "set_num_threads",
    "tensor",
    "uint8",
    "uniform",
    "zeros",
    "zeros_like",
]
__all__ += ops.blockquant.__all__
__all__ += ops.decode.__all__
__all__ += ops.elementwise.__all__
__all__ += ops.fused.__all__
__all__ += ops.indexing.__all__
__all__ += ops.inplace.__all__
__all__ += ops.layout.__all__
__all__ += ops.linalg.__all__
__all__ += ops.linear_layer.__all__
__all__ += ops.paged.__all__
__all__ += ops.projected.__all__
__all__ += ops.quantized.__all__
__all__ += ops.reduction.__all__
__all__ += [
    "BASE_CAPABILITIES",
    "JobUnsupported",
    "UnknownCapability",
    "composed_capabilities",
    "require_capabilities",
]
