"""The backend interface's tables: the API version, every capability with the minor
version that introduced it, what the op layer composes from a backend's own ops, and
the dtypes every backend holds. ``riftco.tensor.backend`` defines the interface itself.
"""

from __future__ import annotations

from riftco.tensor.dtypes import DType

#: (major, minor). Plugins declare the version they implement; a different
#: major makes them unavailable.
BACKEND_API_VERSION = (1, 15)

#: Capability name -> the API minor version that introduced it.
CAPABILITIES: dict[str, int] = {
    name: 0
    for name in (
        "from_numpy to_numpy reshape assign astype copy_strided concat unary binary compare "
        "where reduce argmax matmul index_select index_add gather scatter_add softmax"
    ).split()
}
CAPABILITIES["adam_update"] = 1
CAPABILITIES.update(
    dict.fromkeys(
        "layer_norm layer_norm_backward rms_norm rms_norm_backward activation_backward "
        "cross_entropy cross_entropy_backward rotary attention attention_backward "
        "flash_attention flash_attention_backward attention_varlen write_rows".split(),
        2,
    )
)

CAPABILITIES["paged_attention"] = 3
CAPABILITIES.update(dict.fromkeys(("nf4_dequantize", "nf4_linear", "nf4_linear_backward"), 4))
CAPABILITIES.update(dict.fromkeys(("block_dequantize", "block_linear"), 6))
CAPABILITIES.update(dict.fromkeys(("decode_program", "decode_step"), 7))
CAPABILITIES["clipped_adam_update"] = 8
CAPABILITIES["matmul_compute"] = 9
CAPABILITIES.update(dict.fromkeys(("linear", "linear_backward"), 10))
CAPABILITIES["add_layer_norm"] = 11
CAPABILITIES.update(
    dict.fromkeys(("flash_attention_compute", "flash_attention_backward_compute"), 12)
)
CAPABILITIES.update(dict.fromkeys(("projected_attention", "projected_attention_backward"), 13))
CAPABILITIES["add_layer_norm_backward"] = 14
CAPABILITIES.update(dict.fromkeys(("cross_entropy_mean", "cross_entropy_mean_backward"), 15))

#: What the op layer composes from a backend's own ops where the backend lacks the
#: kernel: capability -> the capabilities the composition calls. The composition runs on
#: the same device; it is listed apart from the backend's kernels (`composed_capabilities`).
COMPOSED: dict[str, tuple[str, ...]] = dict.fromkeys(
    ("block_dequantize", "block_linear"),
    (
        "from_numpy", "reshape", "astype", "copy_strided", "concat", "unary", "binary",
        "compare", "where", "reduce", "matmul", "index_select",
    ),
)  # fmt: skip
#: float32 operands multiplied in a lower compute dtype: rounded by ``astype``, then
#: ``matmul`` (the same products and sums as a kernel that rounds as it loads).
COMPOSED["matmul_compute"] = ("astype", "matmul")
#: A linear layer: the product, then the bias add (forward); the products and the
#: gradient's column sum (backward): the ops a linear layer ran before the kernels.
COMPOSED["linear"] = ("astype", "matmul", "binary")
COMPOSED["linear_backward"] = ("astype", "matmul", "reduce")
#: A residual add and the layer norm of its sum (the ops a block ran before the kernel).
COMPOSED["add_layer_norm"] = ("binary", "layer_norm")
#: Its two results' gradients together: the norm's backward, then the add.
COMPOSED["add_layer_norm_backward"] = ("layer_norm_backward", "binary")
#: Attention whose products may round their float32 operands to the compute dtype: a
#: permission, so without the kernel the op layer takes the float32 products.
COMPOSED["flash_attention_compute"] = ("flash_attention",)
COMPOSED["flash_attention_backward_compute"] = ("flash_attention_backward",)
#: Self-attention through its stacked projections: the weights concatenated, one
#: product, the parts narrowed out, attention (the ops the model layer ran before).
COMPOSED["projected_attention"] = ("concat", "copy_strided", "astype", "matmul", "flash_attention")
#: The mean cross-entropy over the kept rows and its gradient: the per-row loss, the
#: kept count and its reciprocal, the sum and the product (the ops riftco-nn's loss ran).
COMPOSED["cross_entropy_mean"] = ("cross_entropy", "compare", "astype", "reduce", "binary")
COMPOSED["cross_entropy_mean_backward"] = ("binary", "copy_strided", "cross_entropy_backward")
COMPOSED["projected_attention_backward"] = (
    "concat", "astype", "matmul", "reduce", "flash_attention_backward",
)  # fmt: skip

#: The dtypes every backend's storage holds (API 1.0). ``Backend.dtypes`` may add
#: ``bfloat16`` (API 1.5).
BASE_DTYPES: frozenset[DType] = frozenset((DType.float32, DType.int64, DType.bool, DType.uint8))

#: API 1.0's general op layer (storage, layout, elementwise, reductions, matmul, indexing,
#: softmax), which every model path uses; the later capabilities are fused kernels.
BASE_CAPABILITIES: tuple[str, ...] = tuple(
    name for name, minor in CAPABILITIES.items() if minor == 0
)


__all__ = [
    "BACKEND_API_VERSION",
    "BASE_CAPABILITIES",
    "BASE_DTYPES",
    "CAPABILITIES",
    "COMPOSED",
]
