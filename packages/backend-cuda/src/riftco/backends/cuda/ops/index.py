"""Indexing: index_select, index_add, gather, scatter_add and write_rows. Indices
the host uploaded itself (small int64 tensors: token ids, targets, positions) are
checked on the host before any launch, with no wait; any other bad index is flagged
on the device, and reading the flag back is the op's one wait."""

from __future__ import annotations

from riftco.backends.cuda import _native
from riftco.backends.cuda.ops.launch import (
    Launcher,
    count,
    float32_only,
    itemsize,
    kernel,
    outer_inner,
    sized,
)
from riftco.tensor.plugin import DType, Shape

_INDEX_SELECT = sized("index", "index_select")
_GATHER = sized("index", "gather")
_WRITE_ROWS = sized("index", "write_rows")
_CHECK = kernel("index", "check_indices")
_INDEX_ADD = kernel("index", "index_add_f32")
_SCATTER_ADD = kernel("index", "scatter_add_f32")


class IndexOps:
    kernels: Launcher
    device: _native.Device

    def _copy_of(self, x: _native.Buffer, shape: Shape, dtype: str) -> _native.Buffer:
        out = self.kernels.alloc(shape, dtype)
        self.device.copy(out, 0, x, 0, count(shape) * itemsize(dtype))
        return out

    def index_select(self, x, shape: Shape, dtype: DType, axis: int, indices, count_: int):
        outer, n, inner = outer_inner(shape, axis)
        out = self.kernels.alloc((*shape[:axis], count_, *shape[axis + 1 :]), dtype)
        total = outer * count_ * inner
        if self.kernels.host_check(indices, "index_select", n):
            self.kernels.launch(
                _INDEX_SELECT[itemsize(dtype)],
                total,
                [x, indices, out, outer, n, count_, inner, self.kernels.quiet_flag()],
            )
            return out
        flag = self.kernels.flag()
        self.kernels.launch(
            _INDEX_SELECT[itemsize(dtype)], total, [x, indices, out, outer, n, count_, inner, flag]
        )
        if total:
            self.kernels.check_index(flag, indices, "index_select", n)
        elif count_:
            self._check_all(indices, count_, n, "index_select")
        return out

    def _check_all(self, indices, total: int, n: int, op: str) -> _native.Buffer:
        flag = self.kernels.flag()
        self.kernels.launch(_CHECK, total, [indices, total, n, flag])
        return flag

    def index_add(self, base, shape: Shape, axis: int, indices, src, src_shape: Shape):
        float32_only("index_add", base, src)
        outer, n, inner = outer_inner(shape, axis)
        count_ = int(src_shape[axis])
        known = self.kernels.host_check(indices, "index_add", n)
        out = self._copy_of(base, shape, "float32")
        flag = (
            self.kernels.quiet_flag() if known else self._check_all(indices, count_, n, "index_add")
        )
        self.kernels.launch(
            _INDEX_ADD, outer * inner, [indices, src, out, outer, n, count_, inner, flag]
        )
        if not known:
            self.kernels.check_index(flag, indices, "index_add", n)
        return out

    def gather(self, x, shape: Shape, dtype: DType, axis: int, indices, index_shape: Shape):
        outer, n, _ = outer_inner(shape, axis)
        _, m, inner = outer_inner(index_shape, axis)
        out = self.kernels.alloc(index_shape, dtype)
        total = count(index_shape)
        known = self.kernels.host_check(indices, "gather", n)
        flag = self.kernels.quiet_flag() if known else self.kernels.flag()
        self.kernels.launch(
            _GATHER[itemsize(dtype)], total, [x, indices, out, outer, n, m, inner, flag]
        )
        if not known:
            self.kernels.check_index(flag, indices, "gather", n)
        return out

    def scatter_add(self, base, shape: Shape, axis: int, indices, index_shape: Shape, src):
        float32_only("scatter_add", base, src)
        outer, n, _ = outer_inner(shape, axis)
        _, m, inner = outer_inner(index_shape, axis)
        total = count(index_shape)
        known = self.kernels.host_check(indices, "scatter_add", n)
        out = self._copy_of(base, shape, "float32")
        flag = (
            self.kernels.quiet_flag()
            if known
            else self._check_all(indices, total, n, "scatter_add")
        )
        self.kernels.launch(
            _SCATTER_ADD, outer * inner, [indices, src, out, outer, n, m, inner, flag]
        )
        if not known:
            self.kernels.check_index(flag, indices, "scatter_add", n)
        return out

    def write_rows(self, dst, shape: Shape, dtype: DType, rows, src) -> None:
        self.kernels.forget_indices(dst)
        width = count(shape[1:])
        n_rows = int(shape[0])
        rows_count = rows.nbytes // 8
        known = self.kernels.host_check(rows, "write_rows", n_rows)
        flag = (
            self.kernels.quiet_flag()
            if known
            else self._check_all(rows, rows_count, n_rows, "write_rows")
        )
        self.kernels.launch(
            _WRITE_ROWS[itemsize(dtype)],
            rows_count * width,
            [dst, rows, src, rows_count, width, flag],
        )
        if not known:
            self.kernels.check_index(flag, rows, "write_rows", n_rows)
