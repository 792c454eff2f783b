"""Storages and kernel launches of the wgpu backends.

Every element is 32 bits on the device: float32 as ``f32``; int64 as ``i32``
(values outside the int32 range are refused on upload, and integer arithmetic
wraps at 32 bits); bool and uint8 as one ``u32`` each. Layout kernels are
therefore the same for every dtype.

Kernels are the WGSL files of ``kernels/``; a file may hold ``{{NAME}}``
placeholders filled per variant (an element type, an operator). Each variant
compiles once per device. Binding 0 of every kernel is its parameter block
``P`` (32-bit words), bindings 1.. its buffers in declaration order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from riftco.backends.metal import _native
from riftco.backends.metal.errors import GpuError
from riftco.tensor.plugin import DType

#: Threads per workgroup of the one-dimensional kernels.
GROUP = 256
#: How each dtype is held on the device.
DEVICE_DTYPE = {
    DType.float32: np.dtype(np.float32),
    DType.int64: np.dtype(np.int32),
    DType.bool: np.dtype(np.uint32),
    DType.uint8: np.dtype(np.uint32),
}
WGSL_TYPE = {DType.float32: "f32", DType.int64: "i32", DType.bool: "u32", DType.uint8: "u32"}
_I32 = np.iinfo(np.int32)


#: Integer uploads up to this many elements keep a host copy, so that index checks
#: on them need no readback.
HOST_COPY = 1 << 16


class _Pending:
    """An upload not yet made: the bytes, and the buffer once some kernel, copy or
    read needs it (shared by every view of the storage)."""

    __slots__ = ("buffer", "data", "device")

    def __init__(self, device: _native.Device, data: np.ndarray):
        self.device = device
        self.data: np.ndarray | None = data
        self.buffer: _native.Buffer | None = None

    def get(self) -> _native.Buffer:
        if self.buffer is None:
            assert self.data is not None
            self.buffer = self.device.upload(self.data)
            self.data = None
        return self.buffer


class Storage:
    """A tensor's elements on the device: a pooled buffer read as ``count`` elements of
    ``dtype``. Reshapes share the buffer, so in-place writes reach every view.

    ``host`` is a one-element list shared by every view of the buffer: the values as
    uploaded from the host (small integer uploads only), or None once anything may
    have written the buffer on the device (``Runtime.copy`` into it, ``write_rows``).
    Such an upload is deferred until the buffer is first used on the device: indices
    that only the host reads (the whole-step decoder's tokens and positions, checked
    on the host and packed into its own step block) are never uploaded."""

    __slots__ = ("_buffer", "_pending", "count", "dtype", "host")

    def __init__(
        self,
        buffer: _native.Buffer | None,
        count: int,
        dtype: DType,
        host: list[np.ndarray | None] | None = None,
        pending: _Pending | None = None,
    ):
        self._buffer = buffer
        self._pending = pending
        self.count = count
        self.dtype = dtype
        self.host = host

    @property
    def buffer(self) -> _native.Buffer:
        b = self._buffer
        if b is None:
            assert self._pending is not None
            b = self._buffer = self._pending.get()
        return b

    def view(self) -> Storage:
        """Another storage of the same buffer (a reshape), sharing the host copy."""
        return Storage(self._buffer, self.count, self.dtype, self.host, self._pending)

    def written(self) -> None:
        """The buffer is being written on the device: the host copy no longer holds."""
        if self.host is not None:
            self.host[0] = None

    def host_values(self) -> np.ndarray | None:
        return None if self.host is None else self.host[0]

    def __repr__(self) -> str:
        return f"Storage({self.count} x {self.dtype.value})"


def _read(name: str) -> str:
    return resources.files("riftco.backends.metal").joinpath("kernels", f"{name}.wgsl").read_text()


@cache
def _source(name: str) -> str:
    """``common.wgsl``, then the file, whose ``#include other`` lines bring in other files."""
    lines = []
    for line in _read(name).splitlines():
        if line.startswith("#include "):
            lines.append(_read(line.split()[1]))
        else:
            lines.append(line)
    return _read("common") + "\n" + "\n".join(lines)


def snippet(name: str) -> str:
    """The text of ``kernels/<name>.wgsl`` (to fill a placeholder with)."""
    return _read(name)


def f32bits(x: float) -> int:
    """The bits of ``x`` rounded to float32, as a parameter word."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def word(n: int) -> int:
    """An int (possibly negative, within 32 bits) as a parameter word."""
    if not -(1 << 31) <= n < (1 << 32):
        raise GpuError(f"a kernel parameter {n} does not fit in 32 bits")
    return n & 0xFFFFFFFF


def groups_for(n: int, per_group: int = GROUP) -> tuple[int, int, int]:
    """Workgroups covering ``n`` items, folded into two axes past 65535."""
    g = max(1, -(-n // per_group))
    if g <= 65535:
        return (g, 1, 1)
    rows = -(-g // 65535)
    if rows > 65535:
        raise GpuError(f"{n} items are more than one dispatch can cover")
    return (65535, rows, 1)


class Runtime:
    """The device of one backend with its compiled kernels. ``matmul_path`` and
    ``attention_path`` are the kernels chosen when the device opened."""

    def __init__(
        self, device: _native.Device, matmul_path: str = "tiled", attention_path: str = "rows"
    ):
        self.device = device
        self.matmul_path = matmul_path
        #: ``rows`` (a thread per query row, keys read from the buffers) or ``tiled``
        #: (the dense forward shares key/value tiles through workgroup memory).
        self.attention_path = attention_path
        #: The coop matmul path's (tile size, input type, workgroup width): the device's
        #: cooperative matrices, or None where it was opened without them.
        self.coop: tuple[int, str, int] | None = getattr(device, "cooperative_matrix", None)
        #: Index checks answered from a host copy (no readback).
        self.host_checks = 0
        self._kernels: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}

    def kernel(self, file: str, entry: str = "main", **subs: str) -> Any:
        key = (file, entry, tuple(sorted(subs.items())))
        k = self._kernels.get(key)
        if k is None:
            k = self._kernels[key] = self.device.kernel(self.kernel_text(file, **subs), entry)
        return k

    def kernel_text(self, file: str, **subs: str) -> str:
        """The WGSL of ``kernels/<file>.wgsl`` as compiled: after common.wgsl, with the
        placeholders filled and the ``enable`` directives first."""
        text = _source(file)
        for name, value in subs.items():
            text = text.replace("{{" + name + "}}", value)
        if "{{" in text:
            missing = text[text.index("{{") : text.index("}}", text.index("{{")) + 2]
            raise GpuError(f"kernel {file}.wgsl: placeholder {missing} is not filled")
        # `enable` directives must precede every declaration (common.wgsl's too).
        lines = text.splitlines()
        enables = [line for line in lines if line.startswith("enable ")]
        if enables:
            rest = [line for line in lines if not line.startswith("enable ")]
            text = "\n".join(enables + rest)
        return text

    def run(
        self,
        kernel: Any,
        buffers: Sequence[Storage | _native.Buffer],
        params: Sequence[int],
        groups: tuple[int, int, int],
    ) -> None:
        raw = [b.buffer if isinstance(b, Storage) else b for b in buffers]
        self.device.dispatch(kernel, raw, [int(p) for p in params], groups)

    def empty(self, count: int, dtype: DType) -> Storage:
        return Storage(self.device.alloc(4 * count), count, dtype)

    def upload(self, array: np.ndarray, dtype: DType) -> Storage:
        flat = np.ascontiguousarray(array).reshape(-1)
        if dtype is DType.int64 and flat.size and (flat.min() < _I32.min or flat.max() > _I32.max):
            bad = flat[(flat < _I32.min) | (flat > _I32.max)][0]
            raise GpuError(
                f"int64 value {int(bad)} is outside the int32 range this backend holds "
                "integers in on the device"
            )
        device_array = np.ascontiguousarray(flat.astype(DEVICE_DTYPE[dtype], copy=False))
        if dtype is DType.int64 and flat.size <= HOST_COPY:
            # A copy (int64 to int32), so later changes to `array` do not reach it.
            pending = _Pending(self.device, device_array.view(np.uint8))
            return Storage(None, int(flat.size), dtype, [flat.astype(np.int64)], pending)
        buffer = self.device.upload(device_array.view(np.uint8))
        return Storage(buffer, int(flat.size), dtype)

    def upload_words(self, values: Sequence[int] | np.ndarray, dtype: DType) -> Storage:
        return self.upload(np.asarray(values, dtype=DEVICE_DTYPE[dtype]), dtype)

    def download(self, x: Storage) -> np.ndarray:
        raw = self.device.read(x.buffer, 4 * x.count).view(DEVICE_DTYPE[x.dtype])
        return raw.astype(x.dtype.numpy)

    def copy(
        self, src: Storage, dst: Storage, count: int, src_at: int = 0, dst_at: int = 0
    ) -> None:
        dst.written()
        self.device.copy(src.buffer, 4 * src_at, dst.buffer, 4 * dst_at, 4 * count)

    def first_out_of_range(
        self, indices: Storage, size: int, *, allow: int | None = None
    ) -> int | None:
        """The first position of ``indices`` holding a value outside ``[0, size)`` (``allow``:
        one more accepted value, an ignore index), or None. Checked on the host when the
        indices came from there unchanged; otherwise on the device, reading 4 bytes back
        (a synchronization)."""
        if indices.count == 0:
            return None
        known = indices.host_values()
        if known is not None:
            bad = (known < 0) | (known >= size)
            if allow is not None:
                bad &= known != allow
            found = np.flatnonzero(bad)
            self.host_checks += 1
            return int(found[0]) if found.size else None
        flag = self.upload_words([0xFFFFFFFF], DType.bool)
        params = [indices.count, word(size), int(allow is not None), word(allow or 0)]
        self.run(self.kernel("check"), [indices, flag], params, groups_for(indices.count))
        (pos,) = self.device.read(flag.buffer, 4).view(np.uint32)
        return None if pos == 0xFFFFFFFF else int(pos)

    def check_indices(
        self, op: str, indices: Storage, size: int, *, allow: int | None = None
    ) -> None:
        """Raise the CPU backend's error when an index is outside ``[0, size)``."""
        pos = self.first_out_of_range(indices, size, allow=allow)
        if pos is not None:
            known = indices.host_values()
            bad = int(known[pos] if known is not None else self.download(indices)[pos])
            raise GpuError(
                f"{op}: index {bad} at position {pos} is out of range for an axis of size {size}"
            )


def shape_size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def split_axis(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """``(outer, n, inner)`` of ``shape`` around ``axis``."""
    return shape_size(shape[:axis]), int(shape[axis]), shape_size(shape[axis + 1 :])
