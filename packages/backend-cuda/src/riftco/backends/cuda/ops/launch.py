"""Launch helpers shared by every op: kernel names, op codes, launch shapes, shapes
and strides passed by value (riftco.tensor.plugin derives the strides), dtype sizes,
and the device-side error flag."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError, CudaError
from riftco.tensor.plugin import DType

#: Threads of a block (the kernels' THREADS; attention's TILE is 128).
BLOCK = 256
TILE = 128
#: Blocks of a grid-stride launch (kernels loop over what is left).
MAX_BLOCKS = 1 << 16
#: The axes a Dims argument holds (the kernels' MAX_DIMS).
MAX_DIMS = 8
#: The "no bad index" value of an error flag.
NO_BAD = (1 << 63) - 1
#: int64 uploads up to this size keep a host copy, so indexing checks them on the host.
HOST_INDEX_BYTES = 1 << 20
#: How many such host copies are kept (the latest; each holds its buffer alive).
HOST_INDEX_ENTRIES = 64
#: Uploads of at least this size that are all zero bytes become device memsets.
ZERO_SCAN_BYTES = 1 << 16

#: dtype name -> (bytes, kind code of the `convert` kernel). bfloat16 storage is
#: the high half of a float32, as ml_dtypes and torch keep it.
ELEMENTS: dict[str, tuple[int, int]] = {
    "float32": (4, 0),
    "int64": (8, 1),
    "bool": (1, 2),
    "uint8": (1, 3),
    "bfloat16": (2, 4),
}


class Kernel(NamedTuple):
    module: str
    name: str


#: Every kernel an op launches (the NVRTC test checks each is in its module).
KERNELS: set[Kernel] = set()


def kernel(module: str, name: str) -> Kernel:
    k = Kernel(module, name)
    KERNELS.add(k)
    return k


def sized(module: str, stem: str) -> dict[int, Kernel]:
    """The by-element-size variants ``stem_1 stem_2 stem_4 stem_8``."""
    return {size: kernel(module, f"{stem}_{size}") for size in (1, 2, 4, 8)}


def element(dtype: DType | str) -> tuple[int, int]:
    name = dtype if isinstance(dtype, str) else dtype.value
    try:
        return ELEMENTS[name]
    except KeyError:
        raise CudaError(f"cuda has no storage for dtype {name!r}") from None


def itemsize(dtype: DType | str) -> int:
    return element(dtype)[0]


def require(op: str, dtype: DType | str, *allowed: str) -> None:
    """Refuse a dtype the kernels of ``op`` do not read (a ``DTypeError``)."""
    name = dtype if isinstance(dtype, str) else dtype.value
    if name not in allowed:
        raise CudaDTypeError(
            f"{op} on cuda takes {' or '.join(allowed)}, found {name} (convert with .astype first)"
        )


def float32_only(op: str, *buffers: _native.Buffer | None) -> None:
    """Refuse any buffer that is not float32: the norms, softmax, the loss, indexing
    sums, Adam, decoding attention and NF4 read float32 only (mixed precision keeps
    them there), as on the CPU."""
    for buffer in buffers:
        if buffer is not None:
            require(op, buffer.dtype, "float32")


def count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def grid(n: int, block: int = BLOCK) -> tuple[int, int, int]:
    """Blocks for a grid-stride loop over n elements (0: nothing runs)."""
    return (min((n + block - 1) // block, MAX_BLOCKS), 1, 1)


def row_grid(rows: int) -> tuple[int, int, int]:
    return (min(rows, MAX_BLOCKS), 1, 1)


def code(table: Mapping[str, int], capability: str, op: str) -> int:
    """The code the kernels give ``op`` (a table of riftco.backends.cuda.ops.codes)."""
    try:
        return table[op]
    except KeyError:
        raise CudaError(
            f"{capability} on cuda has no kernel for {op!r} (it has {', '.join(table)})"
        ) from None


def dims(values: Sequence[int], fill: int) -> tuple[int, ...]:
    if len(values) > MAX_DIMS:
        raise CudaError(
            f"cuda kernels take views of at most {MAX_DIMS} axes after merging, found {len(values)}"
        )
    return tuple(int(v) for v in values) + (fill,) * (MAX_DIMS - len(values))


def outer_inner(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """``shape`` read as ``[outer, shape[axis], inner]``."""
    return count(shape[:axis]), int(shape[axis]), count(shape[axis + 1 :])


class Launcher:
    """The device and how ops enqueue work on it. ``block`` and ``tile`` are the
    threads of a block (powers of two up to BLOCK and TILE: the kernels size
    their shared memory for those and loop over blockDim)."""

    def __init__(self, device: _native.Device, block: int = BLOCK, tile: int = TILE):
        self.device = device
        self.block, self.tile = block, tile
        # id(buffer) -> (buffer, its int64 values, exact): indices the host already
        # knows, in order (exact), or a set its values are drawn from (not exact).
        self._host_indices: OrderedDict[int, tuple[_native.Buffer, np.ndarray, bool]] = (
            OrderedDict()
        )
        self._quiet: _native.Buffer | None = None
        self._counter: _native.Buffer | None = None

    def remember_indices(self, buf: _native.Buffer, values: np.ndarray, exact: bool = True) -> None:
        """Keep a host copy of a small int64 upload, for host-side index checks; not
        ``exact``: only a set every value of ``buf`` belongs to (``where`` of two
        host-known operands)."""
        if values.nbytes > HOST_INDEX_BYTES:
            return
        flat = np.array(values, dtype=np.int64).reshape(-1)
        self._host_indices[id(buf)] = (buf, flat if exact else np.unique(flat), exact)
        while len(self._host_indices) > HOST_INDEX_ENTRIES:
            self._host_indices.popitem(last=False)

    def forget_indices(self, buf: _native.Buffer) -> None:
        """``buf`` is about to be written on the device: its host copy is stale."""
        self._host_indices.pop(id(buf), None)

    def host_indices(self, buf: _native.Buffer) -> np.ndarray | None:
        """The values of ``buf`` when they came from the host (flat int64), else None."""
        entry = self._host_indices.get(id(buf))
        return entry[1] if entry is not None and entry[0] is buf and entry[2] else None

    def host_candidates(self, buf: _native.Buffer) -> np.ndarray | None:
        """A set of int64 values every element of ``buf`` is one of, else None."""
        entry = self._host_indices.get(id(buf))
        return entry[1] if entry is not None and entry[0] is buf else None

    def quiet_flag(self) -> _native.Buffer:
        """An error flag holding NO_BAD that no launch reports into: for kernels whose
        indices were checked on the host (made once, never read)."""
        if self._quiet is None:
            self._quiet = self.flag()
        return self._quiet

    def counter(self) -> _native.Buffer:
        """A zeroed 32-bit counter for kernels whose last block to finish combines
        the others' partials (``atomicInc`` wraps it back to zero at the end of each
        launch, so one serves every launch of the stream; made once)."""
        if self._counter is None:
            self._counter = self.device.alloc(4, "int32")
            self.device.zero(self._counter)
        return self._counter

    def host_check(
        self, indices: _native.Buffer, op: str, size: int, allowed: int | None = None
    ) -> bool:
        """Check host-known ``indices`` against ``[0, size)`` (and ``allowed``), raising
        as ``check_index`` words it; False when the host does not know them."""
        values = self.host_candidates(indices)
        if values is None:
            return False
        bad = (values < 0) | (values >= size)
        if allowed is not None:
            bad &= values != allowed
        if bad.any() and self.host_indices(indices) is None:
            return False  # a candidate is bad: the device finds whether one is used, and where
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise CudaError(
                f"{op}: index {int(values[pos])} at position {pos} is out of range for an "
                f"axis of size {size}"
            )
        return True

    def alloc(self, shape: Sequence[int], dtype: DType | str) -> _native.Buffer:
        name = dtype if isinstance(dtype, str) else dtype.value
        return self.device.alloc(count(shape) * itemsize(name), name)

    def upload(self, array: np.ndarray, dtype: str) -> _native.Buffer:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return self.device.upload(raw, dtype)

    def upload_i64(self, values: Sequence[int] | np.ndarray) -> _native.Buffer:
        return self.upload(np.asarray(values, dtype=np.int64), "int64")

    def launch(self, k: Kernel, n: int, args: list) -> None:
        """A grid-stride launch over n elements."""
        self.device.launch(k.module, k.name, grid(n, self.block), (self.block, 1, 1), 0, args)

    def rows(self, k: Kernel, rows: int, args: list, tiled: bool = False) -> None:
        """One block per row (grid-stride over rows); ``tiled``: an attention kernel."""
        block = self.tile if tiled else self.block
        self.device.launch(k.module, k.name, row_grid(rows), (block, 1, 1), 0, args)

    def flag(self) -> _native.Buffer:
        """A fresh error flag holding NO_BAD."""
        return self.upload_i64([NO_BAD])

    def first_bad(self, flag: _native.Buffer) -> int | None:
        """The position a kernel reported, or None (reads the flag: a wait)."""
        value = int(self.device.download(flag, 0, 8).view(np.int64)[0])
        return None if value == NO_BAD else value

    def read_i64(self, buf: _native.Buffer, index: int) -> int:
        return int(self.device.download(buf, index * 8, 8).view(np.int64)[0])

    def check_index(
        self, flag: _native.Buffer, indices: _native.Buffer, op: str, size: int
    ) -> None:
        """Raise, worded as every backend words it, if a kernel flagged an index."""
        pos = self.first_bad(flag)
        if pos is not None:
            value = self.read_i64(indices, pos)
            raise CudaError(
                f"{op}: index {value} at position {pos} is out of range for an axis of size {size}"
            )

    def raise_if(self, flag: _native.Buffer, describe: Callable[[int], str]) -> None:
        pos = self.first_bad(flag)
        if pos is not None:
            raise CudaError(describe(pos))
