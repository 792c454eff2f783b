"""NF4 (4-bit NormalFloat) weights: the packed format, its quantizer, and the ops
over the backend capabilities ``nf4_dequantize``, ``nf4_linear`` and
``nf4_linear_backward``.

Quantization (blockwise absmax, QLoRA's NF4)
    The weight ``[rows, cols]`` is read flat (row-major, ``n`` elements) in blocks
    of ``block_size`` consecutive elements (a power of two from 32 to 4096; the last
    block may be shorter). Block ``b`` has the scale ``s_b = max |w|`` over the
    block, and each element gets the index of the NF4 value nearest to
    ``w / s_b`` (float32 division; ties go to the lower index; an all-zero block
    has ``s_b = 0`` and every element the code of 0).

Double quantization (on by default)
    ``m`` is the mean of all block scales (exact sum, divided in float64, rounded
    to float32). For each group of 256 consecutive scales, ``t = max |s_b - m|``
    (float32 differences), and each scale is stored as the byte
    ``q_b = 128 + clamp(round_half_away_from_zero(127 (s_b - m) / t), -127, 127)``
    (the quotient in float64; a group with ``t = 0`` stores 128). A scale decodes
    as ``clamp(m + (t * (q_b - 128)) / 127, 0, FLT_MAX)``, evaluated in float32
    from left to right, which is what every kernel computes.

Dequantization
    element ``i`` is ``NF4[code_i] * scale[i // block_size]`` in float32.

Byte layout (``NF4Weight.to_bytes``, what ``identity`` hashes)
    1. codes: ``ceil(n / 2)`` bytes; element ``2j`` in the low nibble of byte
       ``j``, element ``2j + 1`` in its high nibble (0 when ``n`` is odd);
    2. scales: one byte per block (double-quantized), or one little-endian
       float32 per block;
    3. double-quantized only: one little-endian float32 ``t`` per group of 256
       blocks, then ``m`` as one little-endian float32.

    The shape, the block size and whether the scales are double-quantized are
    metadata (``NF4Weight.metadata``). At block 64 a double-quantized weight costs
    4 + 8/64 + 32/(64 * 256) = about 4.13 bits per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from riftco.core import records_digest
from riftco.tensor.backend import Backend
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import DTypeError, ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.tensor import Tensor

#: The 16 NF4 values (bitsandbytes' table), in code order.
NF4_CODEBOOK = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
NF4_CODEBOOK.flags.writeable = False
#: Block sizes the format allows, and the default.
NF4_BLOCK_SIZES = tuple(2**k for k in range(5, 13))
NF4_DEFAULT_BLOCK_SIZE = 64
#: Block scales that share one range ``t`` under double quantization.
NF4_SCALE_GROUP = 256
FORMAT = "nf4"

# Midpoints between neighbouring codes, exact in float64 (each is the mean of two
# float32 values): a value equal to one is a tie and goes to the lower index.
_MIDPOINTS = (NF4_CODEBOOK[:-1].astype(np.float64) + NF4_CODEBOOK[1:].astype(np.float64)) / 2
_CHUNK_BLOCKS = 1 << 14
_F32, _U8 = np.dtype(np.float32), np.dtype(np.uint8)
_LE_F32 = np.dtype("<f4")


def _check_block_size(block_size: Any) -> int:
    if isinstance(block_size, bool) or block_size not in NF4_BLOCK_SIZES:
        raise ValueError(
            f"nf4: block_size must be a power of two from 32 to 4096, found {block_size!r}"
        )
    return int(block_size)


def _check_shape(shape: Any) -> tuple[int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) != 2 or min(shape) < 0:
        raise ShapeError(f"nf4: expected a weight shape [rows, cols], found {shape}")
    return shape


# -- the numpy definition ---------------------------------------------------------
def quantize_nf4_array(
    weight: np.ndarray, block_size: int = NF4_DEFAULT_BLOCK_SIZE, double_quant: bool = True
) -> dict[str, np.ndarray]:
    """The packed arrays of a float32 weight: ``codes``, ``absmax`` and, when
    ``double_quant``, ``group_range`` and ``offset`` (float32 ``[1]``)."""
    block_size = _check_block_size(block_size)
    flat = np.ascontiguousarray(weight, dtype=np.float32).reshape(-1)
    if not np.isfinite(flat).all():
        raise ValueError("nf4: the weight has non-finite values")
    n = flat.size
    blocks = -(-n // block_size)
    padded = np.zeros(blocks * block_size, np.float32)
    padded[:n] = flat
    grid = padded.reshape(blocks, block_size)
    absmax = np.abs(grid).max(axis=1) if blocks else np.zeros(0, np.float32)
    index = np.empty(blocks * block_size, np.uint8)
    for start in range(0, blocks, _CHUNK_BLOCKS):
        rows, scale = grid[start : start + _CHUNK_BLOCKS], absmax[start : start + _CHUNK_BLOCKS]
        x = np.divide(rows, scale[:, None], out=np.zeros_like(rows), where=scale[:, None] > 0)
        found = np.searchsorted(_MIDPOINTS, x.astype(np.float64).reshape(-1), side="left")
        index[start * block_size : (start + len(rows)) * block_size] = found
    index = index[:n]
    if n % 2:
        index = np.append(index, np.uint8(0))
    codes = (index[0::2] | (index[1::2] << 4)).astype(np.uint8)
    if not double_quant:
        return {"codes": codes, "absmax": absmax.astype(np.float32)}
    return {"codes": codes, **_double_quantize(absmax)}


def _double_quantize(absmax: np.ndarray) -> dict[str, np.ndarray]:
    blocks = absmax.size
    offset = np.float32(math.fsum(absmax.astype(np.float64).tolist()) / blocks if blocks else 0.0)
    diff = (absmax - offset).astype(np.float32)
    groups = -(-blocks // NF4_SCALE_GROUP)
    padded = np.zeros(groups * NF4_SCALE_GROUP, np.float32)
    padded[:blocks] = np.abs(diff)
    ranges = padded.reshape(groups, NF4_SCALE_GROUP).max(axis=1).astype(np.float32)
    t = np.repeat(ranges, NF4_SCALE_GROUP)[:blocks].astype(np.float64)
    ratio = np.divide(127.0 * diff.astype(np.float64), t, out=np.zeros(blocks), where=t > 0)
    magnitude = np.abs(ratio)
    whole = np.floor(magnitude)
    rounded = np.copysign(whole + (magnitude - whole >= 0.5), ratio)
    q = (128 + np.clip(rounded, -127, 127)).astype(np.uint8)
    return {"absmax": q, "group_range": ranges, "offset": np.array([offset], np.float32)}


def decode_nf4_scales(
    absmax: np.ndarray, group_range: np.ndarray | None, offset: float
) -> np.ndarray:
    """Block scales as float32 (decoding double-quantized bytes in float32)."""
    if group_range is None:
        return np.asarray(absmax, dtype=np.float32)
    q = np.asarray(absmax).astype(np.float32) - np.float32(128)
    t = np.repeat(np.asarray(group_range, np.float32), NF4_SCALE_GROUP)[: q.size]
    s = np.float32(offset) + (t * q) / np.float32(127)
    return np.minimum(np.maximum(s, np.float32(0)), np.finfo(np.float32).max).astype(np.float32)


def dequantize_nf4_array(
    codes: np.ndarray,
    absmax: np.ndarray,
    group_range: np.ndarray | None,
    offset: float,
    shape: tuple[int, int],
    block_size: int,
) -> np.ndarray:
    """The float32 weight of packed arrays (the numpy formula kernels are checked against)."""
    n = int(np.prod(shape))
    codes = np.asarray(codes, np.uint8)
    index = np.empty(codes.size * 2, np.uint8)
    index[0::2], index[1::2] = codes & 15, codes >> 4
    scales = np.repeat(decode_nf4_scales(absmax, group_range, offset), block_size)[:n]
    return (NF4_CODEBOOK[index[:n]] * scales).reshape(shape)


# -- the packed weight ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class NF4Weight:
    """A packed NF4 weight ``[rows, cols]`` on a backend (see the module docstring).

    ``codes`` is uint8 ``[ceil(n / 2)]``; ``absmax`` the block scales, uint8 when
    double-quantized (then ``group_range`` is float32 ``[ceil(blocks / 256)]`` and
    ``offset`` the float32 mean ``m``), else float32 (``group_range`` None, ``offset``
    0). No float32 copy of the weight is kept."""

    shape: tuple[int, int]
    block_size: int
    codes: Tensor
    absmax: Tensor
    group_range: Tensor | None
    offset: float

    def __post_init__(self) -> None:
        shape = _check_shape(self.shape)
        object.__setattr__(self, "shape", shape)
        block = _check_block_size(self.block_size)
        n = shape[0] * shape[1]
        blocks = -(-n // block)
        parts = [("codes", self.codes, DType.uint8, (-(-n // 2),))]
        if self.group_range is None:
            parts.append(("absmax", self.absmax, DType.float32, (blocks,)))
        else:
            groups = -(-blocks // NF4_SCALE_GROUP)
            parts.append(("absmax", self.absmax, DType.uint8, (blocks,)))
            parts.append(("group_range", self.group_range, DType.float32, (groups,)))
        for name, t, dtype, expected in parts:
            require_tensor(f"NF4Weight.{name}", t)
            if t.dtype is not dtype or t.shape != expected:
                raise ShapeError(
                    f"NF4Weight: {name} of a {shape} weight at block {block} must be "
                    f"{dtype.value} {expected}, found {t.dtype.value} {t.shape}"
                )
        check_same_backend("NF4Weight", *(t for _, t, _, _ in parts))
        offset = float(np.float32(self.offset))
        if not math.isfinite(offset) or (self.group_range is None and offset != 0.0):
            raise ValueError(
                f"NF4Weight: offset must be finite (0 without double quantization), found {self.offset!r}"
            )
        object.__setattr__(self, "offset", offset)

    # -- facts ----------------------------------------------------------------
    @property
    def double_quant(self) -> bool:
        return self.group_range is not None

    @property
    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def blocks(self) -> int:
        return -(-self.numel // self.block_size)

    @property
    def backend(self) -> Backend:
        return self.codes.backend

    @property
    def nbytes(self) -> int:
        """Bytes of the packed payload (codes, scales, ranges and offset)."""
        n = self.codes.size + self.absmax.size * (1 if self.double_quant else 4)
        if self.group_range is not None:
            n += 4 * self.group_range.size + 4
        return n

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.numel if self.numel else 0.0

    def metadata(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "shape": list(self.shape),
            "block_size": self.block_size,
            "double_quant": self.double_quant,
        }

    def __repr__(self) -> str:
        dq = ", double_quant" if self.double_quant else ""
        return (
            f"NF4Weight({list(self.shape)}, block_size={self.block_size}{dq}, "
            f"{self.bits_per_weight:.3f} bits/weight, {self.backend.name})"
        )

    # -- bytes ----------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        """The payload as numpy copies: ``codes``, ``absmax`` and, double-quantized,
        ``group_range`` and ``offset`` (float32 ``[1]``)."""
        out = {"codes": np.array(self.codes.numpy()), "absmax": np.array(self.absmax.numpy())}
        if self.group_range is not None:
            out["group_range"] = np.array(self.group_range.numpy())
            out["offset"] = np.array([self.offset], np.float32)
        return out

    def to_bytes(self) -> bytes:
        """The byte layout of the module docstring."""
        a = self.arrays()
        parts = [a["codes"].tobytes()]
        if self.double_quant:
            parts += [
                a["absmax"].tobytes(),
                a["group_range"].astype(_LE_F32).tobytes(),
                a["offset"].astype(_LE_F32).tobytes(),
            ]
        else:
            parts.append(a["absmax"].astype(_LE_F32).tobytes())
        return b"".join(parts)

    @cached_property
    def identity(self) -> str:
        """SHA-256 (hex) of the canonical metadata JSON, a zero byte, and the bytes."""
        return records_digest([(self.metadata(), b"\0" + self.to_bytes())])

    @classmethod
    def from_arrays(
        cls,
        arrays: dict[str, np.ndarray],
        shape: tuple[int, int],
        block_size: int,
        backend: str | Backend | None = None,
    ) -> NF4Weight:
        """A packed weight from ``arrays()`` output (checked against the shape)."""
        from riftco.tensor.creation import from_numpy

        def put(name: str, dtype: np.dtype) -> Tensor:
            a = np.asarray(arrays[name])
            if a.dtype != dtype or a.ndim != 1:
                raise DTypeError(
                    f"NF4Weight: {name} must be a 1-d {dtype} array, found {a.dtype} {a.shape}"
                )
            return from_numpy(np.ascontiguousarray(a), backend=backend)

        double = "group_range" in arrays
        absmax = put("absmax", _U8 if double else _F32)
        group_range = put("group_range", _F32) if double else None
        offset = 0.0
        if double:
            o = np.asarray(arrays["offset"])
            if o.dtype != _F32 or o.shape != (1,):
                raise DTypeError(
                    f"NF4Weight: offset must be float32 [1], found {o.dtype} {o.shape}"
                )
            offset = float(o[0])
        return cls(_check_shape(shape), block_size, put("codes", _U8), absmax, group_range, offset)

    def to(self, backend: str | Backend) -> NF4Weight:
        r = self.group_range
        return NF4Weight(
            self.shape,
            self.block_size,
            self.codes.to(backend),
            self.absmax.to(backend),
            None if r is None else r.to(backend),
            self.offset,
        )

    def dequantize(self) -> Tensor:
        return nf4_dequantize(self)

    def _handles(self) -> tuple[Any, Any, Any, float]:
        r = self.group_range
        return self.codes._data, self.absmax._data, None if r is None else r._data, self.offset


def nf4_quantize(
    weight: Tensor | np.ndarray,
    block_size: int = NF4_DEFAULT_BLOCK_SIZE,
    double_quant: bool = True,
    backend: str | Backend | None = None,
) -> NF4Weight:
    """Quantize a float32 ``[rows, cols]`` weight to NF4 (on the host), placing the
    payload on ``backend`` (default: the weight's, or the default backend)."""
    if isinstance(weight, Tensor):
        require_dtype("nf4_quantize", weight, DType.float32)
        backend = weight.backend if backend is None else backend
        array = weight.numpy()
    else:
        array = np.asarray(weight)
        if array.dtype.kind != "f":
            raise DTypeError(f"nf4_quantize: expected float values, found {array.dtype}")
    shape = _check_shape(array.shape)
    arrays = quantize_nf4_array(array, block_size, double_quant)
    return NF4Weight.from_arrays(arrays, shape, block_size, backend)


# -- ops ----------------------------------------------------------------------------
def _input(op: str, x: Tensor, w: NF4Weight, last: int) -> None:
    require_tensor(op, x)
    require_dtype(op, x, DType.float32)
    check_same_backend(op, x, w.codes)
    if x.ndim == 0 or x.shape[-1] != last:
        raise ShapeError(
            f"{op}: expected [..., {last}] for a {list(w.shape)} weight, found {x.shape}"
        )


def nf4_dequantize(w: NF4Weight) -> Tensor:
    """The float32 weight ``[rows, cols]`` (a new tensor; for export and checks)."""
    data = w.backend.nf4_dequantize(*w._handles(), w.shape, w.block_size)
    return Tensor._wrap(data, w.shape, DType.float32, w.backend)


def nf4_linear(x: Tensor, w: NF4Weight, bias: Tensor | None = None) -> Tensor:
    """``x @ dequant(w).T + bias`` for ``x [..., cols]``: ``[..., rows]``. The kernel
    dequantizes tile by tile; the float32 weight never exists whole."""
    _input("nf4_linear", x, w, w.shape[1])
    b = None
    if bias is not None:
        require_tensor("nf4_linear", bias)
        require_dtype("nf4_linear", bias, DType.float32)
        check_same_backend("nf4_linear", x, bias)
        if bias.shape != (w.shape[0],):
            raise ShapeError(f"nf4_linear: bias must be [{w.shape[0]}], found {bias.shape}")
        b = bias._data
    data = w.backend.nf4_linear(x._data, x.shape, *w._handles(), w.shape, w.block_size, b)
    return Tensor._wrap(data, (*x.shape[:-1], w.shape[0]), DType.float32, w.backend)


def nf4_linear_backward(grad: Tensor, w: NF4Weight) -> Tensor:
    """``grad @ dequant(w)`` for ``grad [..., rows]``: the input gradient of
    :func:`nf4_linear`, ``[..., cols]``."""
    _input("nf4_linear_backward", grad, w, w.shape[0])
    data = w.backend.nf4_linear_backward(
        grad._data, grad.shape, *w._handles(), w.shape, w.block_size
    )
    return Tensor._wrap(data, (*grad.shape[:-1], w.shape[1]), DType.float32, w.backend)


__all__ = [
    "NF4_BLOCK_SIZES",
    "NF4_CODEBOOK",
    "NF4_DEFAULT_BLOCK_SIZE",
    "NF4_SCALE_GROUP",
    "NF4Weight",
    "decode_nf4_scales",
    "dequantize_nf4_array",
    "nf4_dequantize",
    "nf4_linear",
    "nf4_linear_backward",
    "nf4_quantize",
    "quantize_nf4_array",
]
