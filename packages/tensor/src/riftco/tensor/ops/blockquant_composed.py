"""llama.cpp's block-layout weights (Q8_0, Q4_0, F16; API 1.6) for a backend without
kernels of its own for them, composed by the op layer from the backend's base ops (so on its device, with no
host round trip): bytes are read with strided copies, turned into values by lookup tables
(``index_select``), and the linear follows the CPU's arithmetic: the input quantized
to 8 bits per block of 32, one exact integer product per block (a batched matmul of
integer-valued float32, exact below 2^24), scaled by ``d * s`` and summed over blocks.
Each call makes float32 copies of the weight's codes: a correct path, not a fast one.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from riftco.tensor.backend import Backend
from riftco.tensor.dtypes import DType

_QK = 32
_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
_I64, _F32, _U8 = DType.int64, DType.float32, DType.uint8


def _tables() -> dict[str, np.ndarray]:
    byte = np.arange(256, dtype=np.uint8)
    return {
        "half": np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32),
        "int8": byte.view(np.int8).astype(np.float32),
        "low": ((byte & 15).astype(np.float32) - 8),
        "high": ((byte >> 4).astype(np.float32) - 8),
    }


class ComposedBlockOps:
    """``block_dequantize`` and ``block_linear`` with the backend's signatures, over the
    base ops of ``backend`` (riftco.tensor.backend.COMPOSED lists them). The op layer
    uses it for a backend that lacks the kernels (`composed_for`)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._tables: dict[str, Any] = {}

    def _table(self, name: str) -> Any:
        if name not in self._tables:
            self._tables[name] = self.backend.from_numpy(np.ascontiguousarray(_tables()[name]))
        return self._tables[name]

    def _lookup(self, table: str, codes_u8: Any, count: int) -> Any:
        """``table[code]`` for ``count`` uint8 codes (flat), as float32 ``[count]``."""
        idx = self.backend.astype(codes_u8, (count,), _U8, _I64)
        size = 1 << 16 if table == "half" else 256
        return self.backend.index_select(self._table(table), (size,), _F32, 0, idx, count)

    def _bytes(self, data: Any, total: int, shape: tuple, strides: list, offset: int) -> Any:
        out = self.backend.copy_strided(data, (total,), _U8, shape, strides, offset)
        return self.backend.reshape(out, shape, (int(np.prod(shape)),))

    def _halves(self, data: Any, total: int, count: int, stride: int, offset: int) -> Any:
        """``count`` little-endian halves at ``offset + stride * i``, as float32."""
        lo = self.backend.astype(
            self._bytes(data, total, (count,), [stride], offset), (count,), _U8, _I64
        )
        hi = self.backend.astype(
            self._bytes(data, total, (count,), [stride], offset + 1), (count,), _U8, _I64
        )
        s256 = self.backend.from_numpy(np.array([256], np.int64))
        hi = self.backend.binary("mul", hi, (count,), s256, (1,), (count,), _I64)
        h = self.backend.binary("add", lo, (count,), hi, (count,), (count,), _I64)
        return self.backend.index_select(self._table("half"), (1 << 16,), _F32, 0, h, count)

    def _codes(self, data: Any, format: str, rows: int, cols: int) -> tuple[Any, Any]:
        """Q8_0 / Q4_0: the codes as float32 ``[blocks, 32]`` (Q4_0: ``nibble - 8``) and
        the half scales as float32 ``[blocks]``."""
        size, blocks = _BLOCK_BYTES[format], rows * cols // _QK
        total = blocks * size
        d = self._halves(data, total, blocks, size, 0)
        if format == "q8_0":
            raw = self._bytes(data, total, (blocks, _QK), [size, 1], 2)
            q = self._lookup("int8", raw, blocks * _QK)
        else:
            raw = self._bytes(data, total, (blocks, 16), [size, 1], 2)
            n = blocks * 16
            lo = self.backend.reshape(self._lookup("low", raw, n), (n,), (blocks, 16))
            hi = self.backend.reshape(self._lookup("high", raw, n), (n,), (blocks, 16))
            q = self.backend.concat([lo, hi], [(blocks, 16), (blocks, 16)], _F32, 1)
        return self.backend.reshape(q, (blocks, _QK), (blocks * _QK,)), d

    def block_dequantize(self, data: Any, format: str, w_shape: tuple) -> Any:
        rows, cols = w_shape
        if format == "f16":
            return self.backend.reshape(
                self._halves(data, 2 * rows * cols, rows * cols, 2, 0), (rows * cols,), (rows, cols)
            )
        q, d = self._codes(data, format, rows, cols)
        blocks = rows * cols // _QK
        q = self.backend.reshape(q, (blocks * _QK,), (blocks, _QK))
        d = self.backend.reshape(d, (blocks,), (blocks, 1))
        w = self.backend.binary("mul", q, (blocks, _QK), d, (blocks, 1), (blocks, _QK), _F32)
        return self.backend.reshape(w, (blocks, _QK), (rows, cols))

    def block_linear(
        self, x: Any, x_shape: tuple, data: Any, format: str, w_shape: tuple, bias: Any
    ) -> Any:
        rows, cols = w_shape
        m = int(np.prod(x_shape[:-1]))
        out_shape = (*x_shape[:-1], rows)
        if format == "f16":
            w = self.block_dequantize(data, format, w_shape)
            y = self.backend.matmul(
                self.backend.reshape(x, x_shape, (m, cols)), (m, cols), w, (rows, cols), False, True
            )
        else:
            y = self._integer_linear(x, m, data, format, rows, cols)
        if bias is not None:
            bias = self.backend.reshape(bias, (rows,), (1, rows))
            y = self.backend.binary("add", y, (m, rows), bias, (1, rows), (m, rows), _F32)
        return self.backend.reshape(y, (m, rows), out_shape)

    def _const(self, value: float) -> Any:
        return self.backend.from_numpy(np.array([value], np.float32))

    def _round_to_half(self, s: Any, shape: tuple) -> Any:
        """Positive ``s`` rounded to the nearest IEEE half (ties to even), as float32.

        Adding ``C = 2^(e + 13)`` (``e`` the binade of ``s``, at least -14, which
        also covers the subnormal halves) leaves a float32 whose last bit is worth
        ``2^(e - 10)``, a half's step there: the float32 addition rounds ``s`` to
        the half grid (ties to even), and subtracting ``C`` is exact. Past 65504
        the half is infinite."""
        b = self.backend
        c = b.binary("mul", s, shape, self._const(0.0), (1,), shape, _F32)
        c = b.binary("add", c, shape, self._const(2.0**-1), (1,), shape, _F32)
        for k in range(-13, 16):
            above = b.compare("ge", s, shape, self._const(2.0**k), (1,), shape, _F32)
            c = b.where(above, shape, self._const(2.0 ** (k + 13)), (1,), c, shape, shape, _F32)
        r = b.binary(
            "sub", b.binary("add", s, shape, c, shape, shape, _F32), shape, c, shape, shape, _F32
        )
        over = b.compare("gt", r, shape, self._const(65504.0), (1,), shape, _F32)
        return b.where(over, shape, self._const(float("inf")), (1,), r, shape, shape, _F32)

    def _integer_linear(self, x: Any, m: int, data: Any, fmt: str, rows: int, cols: int) -> Any:
        b = self.backend
        nb = cols // _QK
        blocks = (m, nb, _QK)
        xb = b.reshape(x, (m * cols,), blocks)
        # The input's 8-bit codes as ggml's quantize_row_q8_0 makes them on x86-64:
        # a = max |x|, the scale half(a / 127), q = round(x * (127 / a)) ties to even.
        a = b.reduce("max", b.unary("abs", xb, blocks, _F32), blocks, _F32, 2)
        s = self._round_to_half(
            b.binary("div", a, (m, nb), self._const(127.0), (1,), (m, nb), _F32), (m, nb)
        )
        zero = self._const(0.0)
        nonzero = b.compare("ne", a, (m, nb), zero, (1,), (m, nb), _F32)
        inv = b.binary("div", self._const(127.0), (1,), a, (m, nb), (m, nb), _F32)
        inv = b.where(nonzero, (m, nb), inv, (m, nb), zero, (1,), (m, nb), _F32)
        inv = b.reshape(inv, (m, nb), (m, nb, 1))
        v = b.binary("mul", xb, blocks, inv, (m, nb, 1), blocks, _F32)
        # To the nearest integer, ties to even: float32 addition of 1.5 * 2^23 (exact
        # for |v| <= 127), NaN to 0 and saturated as the kernels' int8 codes are.
        magic = self._const(1.5 * 2.0**23)
        v = b.where(
            b.compare("eq", v, blocks, v, blocks, blocks, _F32),
            blocks,
            v,
            blocks,
            zero,
            (1,),
            blocks,
            _F32,
        )
        v = b.binary(
            "minimum",
            b.binary("maximum", v, blocks, self._const(-128.0), (1,), blocks, _F32),
            blocks,
            self._const(127.0),
            (1,),
            blocks,
            _F32,
        )
        qx = b.binary(
            "sub",
            b.binary("add", v, blocks, magic, (1,), blocks, _F32),
            blocks,
            magic,
            (1,),
            blocks,
            _F32,
        )
        # Exact integer products per block: [nb, m, 32] @ [nb, rows, 32]^T -> [nb, m, rows].
        qx = self.backend.copy_strided(qx, (m, nb, _QK), _F32, (nb, m, _QK), [_QK, nb * _QK, 1], 0)
        qw, d = self._codes(data, fmt, rows, cols)
        qw = self.backend.copy_strided(
            qw, (rows * nb * _QK,), _F32, (nb, rows, _QK), [_QK, nb * _QK, 1], 0
        )
        isum = self.backend.matmul(qx, (nb, m, _QK), qw, (nb, rows, _QK), False, True)
        # Scales d[r, b] * s[i, b], then the sum over blocks.
        dt = self.backend.copy_strided(d, (rows * nb,), _F32, (nb, 1, rows), [1, 0, nb], 0)
        st = self.backend.copy_strided(s, (m, nb), _F32, (nb, m, 1), [1, nb, 0], 0)
        scale = self.backend.binary("mul", st, (nb, m, 1), dt, (nb, 1, rows), (nb, m, rows), _F32)
        y = self.backend.binary(
            "mul", isum, (nb, m, rows), scale, (nb, m, rows), (nb, m, rows), _F32
        )
        return self.backend.reduce("sum", y, (nb, m, rows), _F32, 0)


_COMPOSED: weakref.WeakKeyDictionary[Backend, ComposedBlockOps] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def composed_for(backend: Backend) -> ComposedBlockOps:
    """The composition over ``backend``'s own ops, made once per backend (its lookup
    tables live on the device)."""
    with _LOCK:
        found = _COMPOSED.get(backend)
        if found is None:
            found = _COMPOSED[backend] = ComposedBlockOps(backend)
        return found


__all__ = ["ComposedBlockOps", "composed_for"]
