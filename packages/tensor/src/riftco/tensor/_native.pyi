# Private compiled module of riftco-tensor. Arrays are C-contiguous numpy
# arrays whose shapes and dtypes the Python side has validated.
from typing import Any, final

import numpy as np

__all__ = [
    "BUILD_ID",
    "BUILD_ID_MARKER",
    "KEEPS_FREED_MEMORY",
    "DecodeProgram",
    "__version__",
    "_panic_for_test",
    "activation_backward",
    "adam_update",
    "argmax",
    "attention",
    "attention_backward",
    "attention_varlen",
    "bf16_from_f32",
    "bf16_to_f32",
    "binary",
    "block_dequantize",
    "block_linear",
    "compare",
    "concat",
    "copy_strided",
    "cpu_isa",
    "cpu_isa_detected",
    "cpu_isa_env_error",
    "cross_entropy",
    "cross_entropy_backward",
    "decode_features",
    "flash_attention",
    "flash_attention_backward",
    "gather",
    "index_add",
    "index_select",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "nf4_dequantize",
    "nf4_linear",
    "nf4_linear_backward",
    "num_threads",
    "paged_attention",
    "reduce",
    "rms_norm",
    "rms_norm_backward",
    "rotary",
    "scatter_add",
    "set_cpu_isa",
    "set_num_threads",
    "softmax",
    "unary",
    "where",
]

__version__: str
BUILD_ID: str
BUILD_ID_MARKER: str
KEEPS_FREED_MEMORY: bool

def unary(op: str, x: np.ndarray) -> np.ndarray: ...
def binary(
    op: str, a: np.ndarray, b: np.ndarray, shape: list[int] | tuple[int, ...]
) -> np.ndarray: ...
def compare(
    op: str, a: np.ndarray, b: np.ndarray, shape: list[int] | tuple[int, ...]
) -> np.ndarray: ...
def where(
    cond: np.ndarray, a: np.ndarray, b: np.ndarray, shape: list[int] | tuple[int, ...]
) -> np.ndarray: ...
def copy_strided(
    x: np.ndarray, shape: list[int], strides: list[int], offset: int
) -> np.ndarray: ...
def concat(xs: list[np.ndarray], axis: int) -> np.ndarray: ...
def reduce(op: str, x: np.ndarray, axis: int) -> np.ndarray: ...
def argmax(x: np.ndarray, axis: int) -> np.ndarray: ...
def matmul(
    a: np.ndarray,
    b: np.ndarray,
    transpose_a: bool,
    transpose_b: bool,
    bias: np.ndarray | None = None,
) -> np.ndarray: ...
def bf16_from_f32(x: np.ndarray) -> np.ndarray: ...
def bf16_to_f32(x: np.ndarray) -> np.ndarray: ...
def index_select(x: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray: ...
def index_add(base: np.ndarray, axis: int, indices: np.ndarray, src: np.ndarray) -> np.ndarray: ...
def gather(x: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray: ...
def scatter_add(
    base: np.ndarray, axis: int, indices: np.ndarray, src: np.ndarray
) -> np.ndarray: ...
def softmax(x: np.ndarray, causal: bool, log: bool) -> np.ndarray: ...
def adam_update(
    params: list[np.ndarray],
    grads: list[np.ndarray],
    m: list[list[np.ndarray]],
    v: list[list[np.ndarray]],
    page_size: int,
    lr: list[float],
    beta1: list[float],
    beta2: list[float],
    eps: list[float],
    weight_decay: list[float],
    decoupled: bool,
    step: list[int],
    grad_scale: float,
) -> int | None: ...
def layer_norm(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def layer_norm_backward(
    dy: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray | None,
    mean: np.ndarray,
    rstd: np.ndarray,
    with_bias: bool,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]: ...
def rms_norm(
    x: np.ndarray, weight: np.ndarray | None, eps: float
) -> tuple[np.ndarray, np.ndarray]: ...
def rms_norm_backward(
    dy: np.ndarray, x: np.ndarray, weight: np.ndarray | None, rstd: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]: ...
def activation_backward(op: str, x: np.ndarray, dy: np.ndarray) -> np.ndarray: ...
def cross_entropy(
    logits: np.ndarray, targets: np.ndarray, ignore_index: int
) -> tuple[np.ndarray, np.ndarray]: ...
def cross_entropy_backward(
    logits: np.ndarray, targets: np.ndarray, lse: np.ndarray, grad: np.ndarray, ignore_index: int
) -> np.ndarray: ...
def rotary(x: np.ndarray, positions: np.ndarray, theta: float, inverse: bool) -> np.ndarray: ...
def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool, window: int
) -> tuple[np.ndarray, np.ndarray]: ...
def attention_backward(
    dout: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    probs: np.ndarray,
    scale: float,
    causal: bool,
    window: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def flash_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def flash_attention_backward(
    dout: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    row_max: np.ndarray,
    row_sum: np.ndarray,
    scale: float,
    causal: bool,
    window: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def attention_varlen(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_starts: list[int],
    q_counts: list[int],
    kv_starts: list[int],
    kv_lengths: list[int],
    scale: float,
    window: int,
) -> np.ndarray: ...
def paged_attention(
    q: np.ndarray,
    k_pages: np.ndarray,
    v_pages: np.ndarray,
    page_table: np.ndarray,
    q_starts: list[int],
    q_counts: list[int],
    kv_lengths: list[int],
    scale: float,
    window: int,
) -> np.ndarray: ...
def nf4_dequantize(
    codes: np.ndarray,
    absmax: np.ndarray,
    group_range: np.ndarray | None,
    offset: float,
    rows: int,
    cols: int,
    block_size: int,
) -> np.ndarray: ...
def nf4_linear(
    x: np.ndarray,
    codes: np.ndarray,
    absmax: np.ndarray,
    group_range: np.ndarray | None,
    offset: float,
    rows: int,
    cols: int,
    block_size: int,
    bias: np.ndarray | None,
) -> np.ndarray: ...
def nf4_linear_backward(
    dy: np.ndarray,
    codes: np.ndarray,
    absmax: np.ndarray,
    group_range: np.ndarray | None,
    offset: float,
    rows: int,
    cols: int,
    block_size: int,
) -> np.ndarray: ...
def block_dequantize(data: np.ndarray, format: str, rows: int, cols: int) -> np.ndarray: ...
def block_linear(
    x: np.ndarray,
    data: np.ndarray,
    format: str,
    rows: int,
    cols: int,
    bias: np.ndarray | None = None,
) -> np.ndarray: ...
def decode_features() -> tuple[list[str], list[str], list[str], list[str]]: ...

@final
class DecodeProgram:
    """A model compiled for whole-step decoding (riftco_kernels::decode)."""

    def __new__(cls, spec: Any) -> DecodeProgram: ...
    def step(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        cache_rows: np.ndarray,
        keys: list[np.ndarray],
        values: list[np.ndarray],
        logit_rows: list[int],
        q_starts: list[int],
        q_counts: list[int],
        kv_starts: list[int],
        kv_lengths: list[int],
        page_table: np.ndarray | None = None,
        page_size: int = 0,
    ) -> np.ndarray: ...
    @property
    def layers(self) -> int: ...

def set_num_threads(threads: int) -> None: ...
def num_threads() -> int: ...
def cpu_isa() -> str: ...
def cpu_isa_detected() -> str: ...
def set_cpu_isa(name: str) -> str: ...
def cpu_isa_env_error() -> str | None: ...
def _panic_for_test() -> None: ...
