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
from riftco.tensor.backend import BACKEND_API_VERSION, CAPABILITIES, Backend
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
from riftco.tensor.dtypes import DType, as_dtype, bool_, float32, int64, uint8
from riftco.tensor.errors import (
    BackendMismatch,
    BackendUnavailable,
    CapabilityMissing,
    DTypeError,
    KernelError,
    RiftcoError,
    ShapeError,
)
from riftco.tensor.ops import (
    abs,
    add,
    argmax,
    broadcast_shapes,
    broadcast_to,
    concatenate,
    div,
    embedding,
    eq,
    exp,
    gather,
    gelu,
    index_add,
    index_select,
    log,
    log_softmax,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mul,
    narrow,
    neg,
    permute,
    pow,
    relu,
    reshape,
    rsqrt,
    scatter_add,
    sigmoid,
    silu,
    softmax,
    sqrt,
    stack,
    sub,
    sum,
    sum_squares,
    sum_to_shape,
    tanh,
    transpose,
    where,
)
from riftco.tensor.ops.fused import (
    activation_backward,
    attention,
    attention_backward,
    attention_varlen,
    attention_with_stats,
    layer_norm,
    layer_norm_backward,
    layer_norm_with_stats,
    rms_norm,
    rms_norm_backward,
    rms_norm_with_stats,
    rotary,
    softmax_cross_entropy,
    softmax_cross_entropy_backward,
    write_rows_,
)
from riftco.tensor.ops.paged import paged_attention
from riftco.tensor.ops.quantized import (
    NF4Weight,
    nf4_dequantize,
    nf4_linear,
    nf4_linear_backward,
    nf4_quantize,
)
from riftco.tensor.registry import BackendInfo, backends, get_backend, reset_discovery
from riftco.tensor.tensor import Tensor, _install_methods

_install_methods()


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


__all__ = [
    "BACKEND_API_VERSION",
    "CAPABILITIES",
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
    "abs",
    "add",
    "arange",
    "argmax",
    "as_dtype",
    "backends",
    "bool_",
    "broadcast_shapes",
    "broadcast_to",
    "concatenate",
    "div",
    "embedding",
    "eq",
    "exp",
    "float32",
    "from_numpy",
    "full",
    "gather",
    "gelu",
    "get_backend",
    "get_num_threads",
    "index_add",
    "index_select",
    "int64",
    "log",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "narrow",
    "native_build_id",
    "neg",
    "normal",
    "ones",
    "ones_like",
    "ops",
    "permute",
    "pow",
    "relu",
    "reset_discovery",
    "reshape",
    "rsqrt",
    "scatter_add",
    "set_num_threads",
    "sigmoid",
    "silu",
    "softmax",
    "sqrt",
    "stack",
    "sub",
    "sum",
    "sum_squares",
    "sum_to_shape",
    "tanh",
    "tensor",
    "transpose",
    "uint8",
    "uniform",
    "where",
    "zeros",
    "zeros_like",
]
__all__ += [
    "activation_backward",
    "attention",
    "attention_backward",
    "attention_varlen",
    "attention_with_stats",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_with_stats",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_with_stats",
    "rotary",
    "softmax_cross_entropy",
    "softmax_cross_entropy_backward",
    "write_rows_",
]
__all__ += [
    "NF4Weight",
    "nf4_dequantize",
    "nf4_linear",
    "nf4_linear_backward",
    "nf4_quantize",
]
__all__ += ["paged_attention"]
