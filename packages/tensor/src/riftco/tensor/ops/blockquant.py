"""Weights in llama.cpp's (ggml's) block layouts for inference: Q8_0, Q4_0 and F16,
their quantizer, and the ops over the backend capabilities ``block_dequantize`` and
``block_linear``.

Byte layout (``BlockWeight.data``, uint8; one row after another, each row exactly as
a GGUF tensor stores it, so a llama.cpp file's bytes are used as they are)
    ``q8_0``: ``cols / 32`` blocks of 34 bytes: the scale ``d`` as a little-endian
    IEEE half, then 32 int8 ``q``; element ``j`` of the block is ``d * q_j``.
    ``q4_0``: ``cols / 32`` blocks of 18 bytes: ``d`` as a half, then 16 bytes; byte
    ``j`` holds element ``j`` in its low nibble and element ``16 + j`` in its high
    one; an element is ``d * (nibble - 8)``.
    ``f16``: ``cols`` little-endian halves.
    Q8_0 and Q4_0 need ``cols`` to be a multiple of 32 (as in llama.cpp).

Quantization (ggml's reference quantizers, so the bytes equal llama.cpp's)
    Per block of 32 float32 values: Q8_0 takes ``a = max |x|``, ``d = a / 127`` and
    ``q = round(x * (1 / d))`` (half away from zero; 0 when ``d`` is 0). Q4_0 takes
    the first value ``m`` of largest magnitude, ``d = m / -8`` and ``q = min(15,
    trunc(x * (1 / d) + 8.5))``. Every step is float32; ``d`` is then rounded to
    half (to nearest even). F16 rounds each value to the nearest half.

The linear (see riftco-kernels' ``blockq``) never makes a float32 weight: Q8_0 and
Q4_0 quantize each input row to 8 bits per block of 32 exactly as ggml's
``quantize_row_q8_0`` does on x86-64 before llama.cpp's ``vec_dot``
(:func:`quantize_activation_rows`: ``a = max |x|``, the scale ``half(a / 127)``, the
codes ``round(x * (127 / a))`` in float32 with ties to even) and sum exact integer
products scaled by the two half scales; F16 multiplies float32 inputs. Its results are
the same whatever the batch size, so decode and prefill agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from riftco.core import records_digest
from riftco.tensor.backend import Backend, composed_capabilities
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import DTypeError, ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.ops.blockquant_composed import composed_for
from riftco.tensor.tensor import Tensor

#: The block formats, and the elements per Q8_0 / Q4_0 block.
BLOCK_FORMATS = ("q8_0", "q4_0", "f16")
BLOCK_QK = 32
_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
_F16_MAX = 65504.0
_ROWS_PER_CHUNK = 4096


def _check_format(fmt: Any) -> str:
    if fmt not in BLOCK_FORMATS:
        raise ValueError(f"block weights: format must be one of {BLOCK_FORMATS}, found {fmt!r}")
    return str(fmt)


def block_row_bytes(fmt: str, cols: int) -> int:
    """Bytes of one row of ``cols`` elements in ``fmt``."""
    fmt = _check_format(fmt)
    if fmt == "f16":
        return 2 * cols
    if cols % BLOCK_QK:
        raise ShapeError(f"{fmt}: a row must hold whole blocks of {BLOCK_QK}, found {cols} columns")
    return cols // BLOCK_QK * _BLOCK_BYTES[fmt]


def _check_shape(shape: Any, fmt: str) -> tuple[int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) != 2 or min(shape) < 0:
        raise ShapeError(f"{fmt}: expected a weight shape [rows, cols], found {shape}")
    block_row_bytes(fmt, shape[1])
    return shape


def _halves(d: np.ndarray, fmt: str) -> np.ndarray:
    h = d.astype(np.float16)
    if not np.isfinite(h).all():
        raise ValueError(f"{fmt}: a block scale overflows a half (|weight| too large)")
    return h.astype("<f2").view(np.uint8).reshape(-1, 2)


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    d = np.abs(blocks).max(axis=1) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = (blocks * inv[:, None]).astype(np.float64)  # the float32 product, exactly
    q = np.copysign(np.floor(np.abs(v) + 0.5), v).astype(np.int8)
    return np.concatenate([_halves(d, "q8_0"), q.view(np.uint8)], axis=1)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    first = np.abs(blocks).argmax(axis=1)
    m = blocks[np.arange(len(blocks)), first]
    d = m / np.float32(-8)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    v = blocks * inv[:, None] + np.float32(8.5)  # float32, in [0.5, 16.5]
    q = np.minimum(np.trunc(v), 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_halves(d, "q4_0"), packed], axis=1)


def quantize_block_array(weight: np.ndarray, fmt: str) -> np.ndarray:
    """The bytes (uint8, flat) of a float32 ``[rows, cols]`` weight in ``fmt``."""
    fmt = _check_format(fmt)
    w = np.ascontiguousarray(weight, dtype=np.float32)
    rows, cols = _check_shape(w.shape, fmt)
    if not np.isfinite(w).all():
        raise ValueError(f"{fmt}: the weight has non-finite values")
    if fmt == "f16":
        if w.size and float(np.abs(w).max()) > _F16_MAX:
            raise ValueError(f"f16: the weight has values beyond the half range (±{_F16_MAX})")
        return w.astype("<f2").view(np.uint8).reshape(-1)
    quant = _q8_0 if fmt == "q8_0" else _q4_0
    out = np.empty(rows * block_row_bytes(fmt, cols), np.uint8)
    step = _ROWS_PER_CHUNK * block_row_bytes(fmt, cols)
    for i, start in enumerate(range(0, rows, _ROWS_PER_CHUNK)):
        blocks = w[start : start + _ROWS_PER_CHUNK].reshape(-1, BLOCK_QK)
        part = quant(blocks).reshape(-1)
        out[i * step : i * step + part.size] = part
    return out


def dequantize_block_array(data: np.ndarray, fmt: str, shape: tuple[int, int]) -> np.ndarray:
    """The float32 weight of packed bytes (the numpy formula kernels are checked against)."""
    fmt = _check_format(fmt)
    rows, cols = _check_shape(shape, fmt)
    raw = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    if raw.size != rows * block_row_bytes(fmt, cols):
        raise ShapeError(
            f"{fmt}: a {[rows, cols]} weight needs {rows * block_row_bytes(fmt, cols)} "
            f"bytes, found {raw.size}"
        )
    if fmt == "f16":
        return raw.view("<f2").astype(np.float32).reshape(rows, cols)
    blocks = raw.reshape(-1, _BLOCK_BYTES[fmt])
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)
    if fmt == "q8_0":
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
    else:
        nib = blocks[:, 2:]
        q = np.concatenate([nib & 15, nib >> 4], axis=1).astype(np.float32) - np.float32(8)
    return (d * q).astype(np.float32).reshape(rows, cols)


def quantize_activation_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Input rows ``[m, cols]`` as the Q8_0 / Q4_0 linear quantizes them, which is
    ggml's ``quantize_row_q8_0`` on x86-64 (AVX2): int8 codes ``[m, cols]`` and the
    block scales ``[m, cols / 32]`` as float32 holding halves.

    Per block, in float32: ``a = max |x|``; the scale is ``a / 127`` rounded to a half
    (to nearest even; infinite past 65504, so a block beyond about 8.3e6 gives
    non-finite products, as in llama.cpp); the codes are ``x * (127 / a)`` (0 when
    ``a`` is 0) rounded to nearest with ties to even. ggml's portable reference
    (``quantize_row_q8_0_ref``) takes ``x * (1 / (a / 127))`` and rounds ties away from
    zero: the codes differ only where a product lands on (or an ulp from) a tie."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    m, cols = x.shape
    blocks = x.reshape(m, cols // BLOCK_QK, BLOCK_QK)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a = np.abs(blocks).max(axis=2)
        s = (a / np.float32(127)).astype(np.float16).astype(np.float32)
        inv = np.divide(np.float32(127), a, out=np.zeros_like(a), where=a != 0)
        v = blocks * inv[..., None]  # float32, as ggml multiplies
        v = np.where(np.isnan(v), np.float32(0), v)  # saturated below, NaN to 0
    q = np.clip(np.rint(v), -128, 127).astype(np.int8)
    return q.reshape(m, cols), s


def block_linear_reference(
    x: np.ndarray, data: np.ndarray, fmt: str, shape: tuple[int, int]
) -> np.ndarray:
    """``x [m, cols] @ W^T`` as the kernels define it, summed in float64: for Q8_0 and
    Q4_0 the sum over blocks of ``d_w * s_x * (exact integer dot product)`` with the
    input quantized by :func:`quantize_activation_rows` (llama.cpp's arithmetic, which
    sums in float32)."""
    w = dequantize_block_array(data, fmt, shape)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if fmt == "f16":
        return x.astype(np.float64) @ w.T.astype(np.float64)
    rows, cols = shape
    raw = np.ascontiguousarray(data, np.uint8).reshape(rows, cols // BLOCK_QK, -1)
    d = raw[..., :2].copy().view("<f2").astype(np.float64)[..., 0]  # [rows, blocks]
    wq = np.rint(w.astype(np.float64) / np.where(d == 0, 1, d).repeat(BLOCK_QK, axis=1))
    q, s = quantize_activation_rows(x)
    xb = q.astype(np.float64).reshape(len(x), -1, BLOCK_QK)
    wb = wq.reshape(rows, -1, BLOCK_QK)
    isum = np.einsum("mbk,rbk->mrb", xb, wb)
    scale = s.astype(np.float64)[:, None, :] * d[None, :, :]
    with np.errstate(invalid="ignore"):
        return (isum * scale).sum(axis=2)


@dataclass(frozen=True, eq=False)
class BlockWeight:
    """A weight ``[rows, cols]`` in a llama.cpp block layout (see the module docstring):
    ``data`` is uint8 ``[rows * row_bytes]``. No float32 copy is kept."""

    format: str
    shape: tuple[int, int]
    data: Tensor

    def __post_init__(self) -> None:
        fmt = _check_format(self.format)
        shape = _check_shape(self.shape, fmt)
        object.__setattr__(self, "shape", shape)
        require_tensor("BlockWeight.data", self.data)
        want = (shape[0] * block_row_bytes(fmt, shape[1]),)
        if self.data.dtype is not DType.uint8 or self.data.shape != want:
            raise ShapeError(
                f"BlockWeight: data of a {fmt} {list(shape)} weight must be uint8 {want}, "
                f"found {self.data.dtype.value} {self.data.shape}"
            )

    @property
    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def backend(self) -> Backend:
        return self.data.backend

    @property
    def nbytes(self) -> int:
        return self.data.size

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.numel if self.numel else 0.0

    def metadata(self) -> dict[str, Any]:
        return {"format": self.format, "shape": list(self.shape)}

    def __repr__(self) -> str:
        return (
            f"BlockWeight({self.format}, {list(self.shape)}, "
            f"{self.bits_per_weight:.2f} bits/weight, {self.backend.name})"
        )

    def to_bytes(self) -> bytes:
        return np.asarray(self.data.numpy()).tobytes()

    @cached_property
    def identity(self) -> str:
        """SHA-256 (hex) of the canonical metadata JSON, a zero byte, and the bytes."""
        return records_digest([(self.metadata(), b"\0" + self.to_bytes())])

    @classmethod
    def from_bytes(
        cls,
        data: bytes | np.ndarray,
        fmt: str,
        shape: tuple[int, int],
        backend: str | Backend | None = None,
    ) -> BlockWeight:
        """A weight over ``data`` (raw bytes or a uint8 array, e.g. a GGUF tensor's)."""
        from riftco.tensor.creation import from_numpy

        if isinstance(data, bytes | bytearray | memoryview):
            raw = np.frombuffer(data, np.uint8)
        else:
            raw = np.asarray(data)
            if raw.dtype != np.uint8:
                raise DTypeError(f"BlockWeight: expected uint8 bytes, found {raw.dtype}")
        raw = np.ascontiguousarray(raw.reshape(-1))
        return cls(fmt, shape, from_numpy(raw.copy(), backend=backend))

    def to(self, backend: str | Backend) -> BlockWeight:
        return BlockWeight(self.format, self.shape, self.data.to(backend))

    def dequantize(self) -> Tensor:
        return block_dequantize(self)


def block_quantize(
    weight: Tensor | np.ndarray, fmt: str, backend: str | Backend | None = None
) -> BlockWeight:
    """Quantize a float32 ``[rows, cols]`` weight to ``fmt`` (on the host), placing the
    bytes on ``backend`` (default: the weight's, or the default backend)."""
    if isinstance(weight, Tensor):
        require_dtype("block_quantize", weight, DType.float32)
        backend = weight.backend if backend is None else backend
        array = weight.numpy()
    else:
        array = np.asarray(weight)
        if array.dtype.kind != "f":
            raise DTypeError(f"block_quantize: expected float values, found {array.dtype}")
    shape = _check_shape(array.shape, _check_format(fmt))
    return BlockWeight.from_bytes(quantize_block_array(array, fmt), fmt, shape, backend)


def _kernels(backend: Backend, capability: str) -> Any:
    """The backend where it has the kernel, else the composition over its own ops
    (riftco.tensor.ops.blockquant_composed): on the same device, never another."""
    if capability in backend.capabilities():
        return backend
    if capability in composed_capabilities(backend):
        return composed_for(backend)
    raise backend._missing(capability)


def block_dequantize(w: BlockWeight) -> Tensor:
    """The float32 weight ``[rows, cols]`` (a new tensor; for export and checks)."""
    data = _kernels(w.backend, "block_dequantize").block_dequantize(w.data._data, w.format, w.shape)
    return Tensor._wrap(data, w.shape, DType.float32, w.backend)


def block_linear(x: Tensor, w: BlockWeight, bias: Tensor | None = None) -> Tensor:
    """``x @ W.T + bias`` for ``x [..., cols]``: ``[..., rows]``, reading the blocks in
    place (see the module docstring for the arithmetic)."""
    require_tensor("block_linear", x)
    require_dtype("block_linear", x, DType.float32)
    check_same_backend("block_linear", x, w.data)
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ShapeError(
            f"block_linear: expected [..., {w.shape[1]}] for a {list(w.shape)} weight, "
            f"found {x.shape}"
        )
    b = None
    if bias is not None:
        require_tensor("block_linear", bias)
        require_dtype("block_linear", bias, DType.float32)
        check_same_backend("block_linear", x, bias)
        if bias.shape != (w.shape[0],):
            raise ShapeError(f"block_linear: bias must be [{w.shape[0]}], found {bias.shape}")
        b = bias._data
    kernels = _kernels(w.backend, "block_linear")
    data = kernels.block_linear(x._data, x.shape, w.data._data, w.format, w.shape, b)
    return Tensor._wrap(data, (*x.shape[:-1], w.shape[0]), DType.float32, w.backend)


__all__ = [
    "BLOCK_FORMATS",
    "BLOCK_QK",
    "BlockWeight",
    "block_dequantize",
    "block_linear",
    "block_linear_reference",
    "block_quantize",
    "block_row_bytes",
    "dequantize_block_array",
    "quantize_activation_rows",
    "quantize_block_array",
]
