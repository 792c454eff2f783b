"""llama.cpp's block-layout weights (Q8_0, Q4_0, F16; API 1.6) for a backend without
kernels of its own for them, composed from its base ops (so on its device, with no
host round trip): bytes are read with strided copies, turned into values by lookup tables
(``index_select``), and the linear follows the CPU's arithmetic: the input quantized
to 8 bits per block of 32, one exact integer product per block (a batched matmul of
integer-valued float32, exact below 2^24), scaled by ``d * s`` and summed over blocks.
Each call makes float32 copies of the weight's codes: a correct path, not a fast one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    """Mixin of ``block_dequantize`` and ``block_linear`` over a backend's base ops
    (``copy_strided``, ``index_select``, ``binary``, ``matmul``, ...): put it before
    ``Backend`` in the bases."""

    def _table(self: Any, name: str) -> Any:
        cache = self.__dict__.setdefault("_block_tables", {})
        if name not in cache:
            cache[name] = self.from_numpy(np.ascontiguousarray(_tables()[name]))
        return cache[name]

    def _lookup(self: Any, table: str, codes_u8: Any, count: int) -> Any:
        """``table[code]`` for ``count`` uint8 codes (flat), as float32 ``[count]``."""
        idx = self.astype(codes_u8, (count,), _U8, _I64)
        size = 1 << 16 if table == "half" else 256
        return self.index_select(self._table(table), (size,), _F32, 0, idx, count)

    def _bytes(self: Any, data: Any, total: int, shape: tuple, strides: list, offset: int) -> Any:
        out = self.copy_strided(data, (total,), _U8, shape, strides, offset)
        return self.reshape(out, shape, (int(np.prod(shape)),))

    def _halves(self: Any, data: Any, total: int, count: int, stride: int, offset: int) -> Any:
        """``count`` little-endian halves at ``offset + stride * i``, as float32."""
        lo = self.astype(self._bytes(data, total, (count,), [stride], offset), (count,), _U8, _I64)
        hi = self.astype(
            self._bytes(data, total, (count,), [stride], offset + 1), (count,), _U8, _I64
        )
        s256 = self.from_numpy(np.array([256], np.int64))
        hi = self.binary("mul", hi, (count,), s256, (1,), (count,), _I64)
        h = self.binary("add", lo, (count,), hi, (count,), (count,), _I64)
        return self.index_select(self._table("half"), (1 << 16,), _F32, 0, h, count)

    def _codes(self: Any, data: Any, format: str, rows: int, cols: int) -> tuple[Any, Any]:
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
            lo = self.reshape(self._lookup("low", raw, n), (n,), (blocks, 16))
            hi = self.reshape(self._lookup("high", raw, n), (n,), (blocks, 16))
            q = self.concat([lo, hi], [(blocks, 16), (blocks, 16)], _F32, 1)
        return self.reshape(q, (blocks, _QK), (blocks * _QK,)), d

    def block_dequantize(self: Any, data: Any, format: str, w_shape: tuple) -> Any:
        rows, cols = w_shape
        if format == "f16":
            return self.reshape(
                self._halves(data, 2 * rows * cols, rows * cols, 2, 0), (rows * cols,), (rows, cols)
            )
        q, d = self._codes(data, format, rows, cols)
        blocks = rows * cols // _QK
        q = self.reshape(q, (blocks * _QK,), (blocks, _QK))
        d = self.reshape(d, (blocks,), (blocks, 1))
        w = self.binary("mul", q, (blocks, _QK), d, (blocks, 1), (blocks, _QK), _F32)
        return self.reshape(w, (blocks, _QK), (rows, cols))

    def block_linear(
        self: Any, x: Any, x_shape: tuple, data: Any, format: str, w_shape: tuple, bias: Any
    ) -> Any:
        rows, cols = w_shape
        m = int(np.prod(x_shape[:-1]))
        out_shape = (*x_shape[:-1], rows)
        if format == "f16":
            w = self.block_dequantize(data, format, w_shape)
            y = self.matmul(
                self.reshape(x, x_shape, (m, cols)), (m, cols), w, (rows, cols), False, True
            )
        else:
            y = self._integer_linear(x, m, data, format, rows, cols)
        if bias is not None:
            bias = self.reshape(bias, (rows,), (1, rows))
            y = self.binary("add", y, (m, rows), bias, (1, rows), (m, rows), _F32)
        return self.reshape(y, (m, rows), out_shape)

    def _integer_linear(
        self: Any, x: Any, m: int, data: Any, fmt: str, rows: int, cols: int
    ) -> Any:
        nb = cols // _QK
        xb = self.reshape(x, (m * cols,), (m, nb, _QK))
        # The input's 8-bit codes: s = max |x| / 127, q = round(x / s) half away from 0.
        ax = self.unary("abs", xb, (m, nb, _QK), _F32)
        s = self.reduce("max", ax, (m, nb, _QK), _F32, 2)
        c127 = self.from_numpy(np.array([127], np.float32))
        s = self.binary("div", s, (m, nb), c127, (1,), (m, nb), _F32)
        zero = self.from_numpy(np.array([0], np.float32))
        one = self.from_numpy(np.array([1], np.float32))
        nonzero = self.compare("ne", s, (m, nb), zero, (1,), (m, nb), _F32)
        inv = self.binary("div", one, (1,), s, (m, nb), (m, nb), _F32)
        inv = self.where(nonzero, (m, nb), inv, (m, nb), zero, (1,), (m, nb), _F32)
        inv = self.reshape(inv, (m, nb), (m, nb, 1))
        v = self.binary("mul", xb, (m, nb, _QK), inv, (m, nb, 1), (m, nb, _QK), _F32)
        half = self.from_numpy(np.array([0.5], np.float32))
        mag = self.binary(
            "add",
            self.unary("abs", v, (m, nb, _QK), _F32),
            (m, nb, _QK),
            half,
            (1,),
            (m, nb, _QK),
            _F32,
        )
        mag = self.astype(self.astype(mag, (m, nb, _QK), _F32, _I64), (m, nb, _QK), _I64, _F32)
        neg = self.compare("lt", v, (m, nb, _QK), zero, (1,), (m, nb, _QK), _F32)
        qx = self.where(
            neg,
            (m, nb, _QK),
            self.unary("neg", mag, (m, nb, _QK), _F32),
            (m, nb, _QK),
            mag,
            (m, nb, _QK),
            (m, nb, _QK),
            _F32,
        )
        # Exact integer products per block: [nb, m, 32] @ [nb, rows, 32]^T -> [nb, m, rows].
        qx = self.copy_strided(qx, (m, nb, _QK), _F32, (nb, m, _QK), [_QK, nb * _QK, 1], 0)
        qw, d = self._codes(data, fmt, rows, cols)
        qw = self.copy_strided(qw, (rows * nb * _QK,), _F32, (nb, rows, _QK), [_QK, nb * _QK, 1], 0)
        isum = self.matmul(qx, (nb, m, _QK), qw, (nb, rows, _QK), False, True)
        # Scales d[r, b] * s[i, b], then the sum over blocks.
        dt = self.copy_strided(d, (rows * nb,), _F32, (nb, 1, rows), [1, 0, nb], 0)
        st = self.copy_strided(s, (m, nb), _F32, (nb, m, 1), [1, nb, 0], 0)
        scale = self.binary("mul", st, (nb, m, 1), dt, (nb, 1, rows), (nb, m, rows), _F32)
        y = self.binary("mul", isum, (nb, m, rows), scale, (nb, m, rows), (nb, m, rows), _F32)
        return self.reduce("sum", y, (nb, m, rows), _F32, 0)


__all__ = ["ComposedBlockOps"]
