"""Type stubs of the private native module (riftco-pjrt bindings)."""

from collections.abc import Sequence
from pathlib import Path
from typing import final

import numpy as np
from typing_extensions import Self

__all__ = [
    "BUILD_ID",
    "BUILD_ID_MARKER",
    "PJRT_API_MAJOR",
    "PJRT_API_MINOR",
    "Device",
    "Storage",
    "__version__",
    "activation_backward",
    "adam_update",
    "argmax",
    "assign",
    "astype",
    "attention",
    "attention_backward",
    "attention_varlen",
    "binary",
    "compare",
    "concat",
    "copy_strided",
    "cross_entropy",
    "cross_entropy_backward",
    "flash_attention",
    "flash_attention_backward",
    "from_numpy",
    "gather",
    "index_add",
    "index_select",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "nf4_dequantize",
    "nf4_linear",
    "nf4_linear_backward",
    "paged_attention",
    "reduce",
    "reshape",
    "rms_norm",
    "rms_norm_backward",
    "rotary",
    "scatter_add",
    "select",
    "softmax",
    "to_numpy",
    "unary",
    "write_rows",
]

__version__: str
BUILD_ID: str
BUILD_ID_MARKER: str
PJRT_API_MAJOR: int
PJRT_API_MINOR: int

#: A client option value: PJRT's bool, int64, float, string or int64 list.
_OptionValue = bool | int | float | str | list[int]

@final
class Device:
    """An opened PJRT plugin, its client (created on first use), and the compile caches."""

    def __new__(
        cls,
        path: str,
        options: Sequence[tuple[str, _OptionValue]] | None = None,
        *,
        deterministic: bool = True,
        cache_dir: str | None = None,
        cache_max_bytes: int = 1073741824,
    ) -> Self: ...
    @property
    def platform(self) -> str: ...
    @property
    def platform_version(self) -> str: ...
    @property
    def device_kind(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def device_count(self) -> int: ...
    @property
    def is_host(self) -> bool: ...
    @property
    def plugin_kind(self) -> str: ...
    @property
    def client_created(self) -> bool: ...
    @property
    def client_options(self) -> list[str]: ...
    def compile_options(self) -> bytes: ...
    @property
    def plugin_path(self) -> str: ...
    @property
    def api_version(self) -> tuple[int, int]: ...
    @property
    def attributes(self) -> list[tuple[str, str]]: ...
    def cache_stats(self) -> tuple[int, int, int]: ...
    @property
    def disk_cache_dir(self) -> Path | None: ...
    def disk_cache_stats(self) -> tuple[int, int, int, int, int]: ...
    def clear_cache(self) -> None: ...

@final
class Storage:
    """A device buffer read under a tensor shape."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def buffer_shape(self) -> tuple[int, ...]: ...

def from_numpy(device: Device, array: np.ndarray) -> Storage: ...
def to_numpy(x: Storage) -> np.ndarray: ...
def reshape(x: Storage, new_shape: list[int]) -> Storage: ...
def assign(dst: Storage, src: Storage) -> None: ...
def astype(device: Device, x: Storage, dtype: str) -> Storage: ...
def copy_strided(
    device: Device, x: Storage, out_shape: list[int], strides: list[int], offset: int
) -> Storage: ...
def concat(device: Device, xs: list[Storage], axis: int) -> Storage: ...
def unary(device: Device, op: str, x: Storage) -> Storage: ...
def binary(device: Device, op: str, a: Storage, b: Storage, out_shape: list[int]) -> Storage: ...
def compare(device: Device, op: str, a: Storage, b: Storage, out_shape: list[int]) -> Storage: ...
def select(
    device: Device, cond: Storage, a: Storage, b: Storage, out_shape: list[int]
) -> Storage: ...
def reduce(device: Device, op: str, x: Storage, axis: int) -> Storage: ...
def argmax(device: Device, x: Storage, axis: int) -> Storage: ...
def softmax(device: Device, x: Storage, causal: bool, log: bool) -> Storage: ...
def matmul(
    device: Device, a: Storage, b: Storage, transpose_a: bool, transpose_b: bool
) -> Storage: ...
def index_select(device: Device, x: Storage, axis: int, indices: Storage) -> Storage: ...
def index_add(
    device: Device, base: Storage, axis: int, indices: Storage, src: Storage
) -> Storage: ...
def gather(device: Device, x: Storage, axis: int, indices: Storage) -> Storage: ...
def scatter_add(
    device: Device, base: Storage, axis: int, indices: Storage, src: Storage
) -> Storage: ...
def adam_update(
    device: Device,
    params: list[Storage],
    grads: list[Storage],
    m: list[list[Storage]],
    v: list[list[Storage]],
    sizes: list[int],
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
    device: Device, x: Storage, weight: Storage | None, bias: Storage | None, eps: float
) -> tuple[Storage, Storage, Storage]: ...
def layer_norm_backward(
    device: Device,
    dy: Storage,
    x: Storage,
    weight: Storage | None,
    mean: Storage,
    rstd: Storage,
    with_bias: bool,
) -> tuple[Storage, Storage | None, Storage | None]: ...
def rms_norm(
    device: Device, x: Storage, weight: Storage | None, eps: float
) -> tuple[Storage, Storage]: ...
def rms_norm_backward(
    device: Device, dy: Storage, x: Storage, weight: Storage | None, rstd: Storage
) -> tuple[Storage, Storage | None]: ...
def activation_backward(device: Device, op: str, x: Storage, dy: Storage) -> Storage: ...
def cross_entropy(
    device: Device, logits: Storage, targets: Storage, ignore_index: int
) -> tuple[Storage, Storage]: ...
def cross_entropy_backward(
    device: Device,
    logits: Storage,
    targets: Storage,
    lse: Storage,
    grad: Storage,
    ignore_index: int,
) -> Storage: ...
def rotary(
    device: Device, x: Storage, positions: Storage, theta: float, inverse: bool
) -> Storage: ...
def attention(
    device: Device,
    q: Storage,
    k: Storage,
    v: Storage,
    scale: float,
    causal: bool,
    window: int,
) -> tuple[Storage, Storage]: ...
def attention_backward(
    device: Device,
    dout: Storage,
    q: Storage,
    k: Storage,
    v: Storage,
    probs: Storage,
    scale: float,
) -> tuple[Storage, Storage, Storage]: ...
def flash_attention(
    device: Device,
    q: Storage,
    k: Storage,
    v: Storage,
    scale: float,
    causal: bool,
    window: int,
) -> tuple[Storage, Storage, Storage]: ...
def flash_attention_backward(
    device: Device,
    dout: Storage,
    q: Storage,
    k: Storage,
    v: Storage,
    row_max: Storage,
    row_sum: Storage,
    scale: float,
    causal: bool,
    window: int,
) -> tuple[Storage, Storage, Storage]: ...
def attention_varlen(
    device: Device,
    q: Storage,
    k: Storage,
    v: Storage,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_starts: Sequence[int],
    kv_lengths: Sequence[int],
    scale: float,
    window: int,
) -> Storage: ...
def paged_attention(
    device: Device,
    q: Storage,
    k_pages: Storage,
    v_pages: Storage,
    page_table: Storage,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_lengths: Sequence[int],
    scale: float,
    window: int,
) -> Storage: ...
def write_rows(device: Device, dst: Storage, rows: Storage, src: Storage) -> None: ...
def nf4_dequantize(
    device: Device,
    codes: Storage,
    absmax: Storage,
    group_range: Storage | None,
    offset: float,
    w_shape: list[int],
    block_size: int,
) -> Storage: ...
def nf4_linear(
    device: Device,
    x: Storage,
    codes: Storage,
    absmax: Storage,
    group_range: Storage | None,
    offset: float,
    w_shape: list[int],
    block_size: int,
    bias: Storage | None,
) -> Storage: ...
def nf4_linear_backward(
    device: Device,
    dy: Storage,
    codes: Storage,
    absmax: Storage,
    group_range: Storage | None,
    offset: float,
    w_shape: list[int],
    block_size: int,
) -> Storage: ...
