"""Storage, layout, elementwise ops, reductions, softmax and matmul.

bfloat16 (API 1.5): stored as its bits; layout ops and ``where`` copy them;
elementwise ops and comparisons widen to float32 in the kernel and round results
once to bfloat16; ``matmul`` of two bfloat16 operands is a cuBLAS product with
float32 accumulation and a float32 result; reductions and softmax refuse it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError
from riftco.backends.cuda.ops import codes
from riftco.backends.cuda.ops.launch import (
    ZERO_SCAN_BYTES,
    Launcher,
    code,
    count,
    dims,
    element,
    float32_only,
    itemsize,
    kernel,
    outer_inner,
    require,
    sized,
)
from riftco.tensor.plugin import DType, Shape, broadcast_strides, coalesce

_UNARY_F32 = kernel("elementwise", "unary_f32")
_UNARY_BF16 = kernel("elementwise", "unary_bf16")
_UNARY_I64 = kernel("elementwise", "unary_i64")
_NOT = kernel("elementwise", "logical_not_b")
_BINARY = {
    "float32": kernel("elementwise", "binary_f32"),
    "int64": kernel("elementwise", "binary_i64"),
    "bfloat16": kernel("elementwise", "binary_bf16"),
}
_COMPARE = {
    "float32": kernel("elementwise", "compare_f32"),
    "int64": kernel("elementwise", "compare_i64"),
    "bool": kernel("elementwise", "compare_u8"),
    "uint8": kernel("elementwise", "compare_u8"),
    "bfloat16": kernel("elementwise", "compare_bf16"),
}
_WHERE = sized("elementwise", "where")
_CONVERT = kernel("elementwise", "convert")
_COPY_STRIDED = sized("layout", "copy_strided")
_PLACE = sized("layout", "place")
_PLACE_MANY = sized("layout", "place_many")
#: Concatenations of at least this many operands are one launch (an address table).
_PLACE_MANY_FROM = 3
_REDUCE_ROWS = kernel("reduce", "reduce_rows_f32")
_REDUCE_COLS = kernel("reduce", "reduce_cols_f32")
_REDUCE_COLS_TILED = kernel("reduce", "reduce_cols_tiled_f32")
#: The tiled column reduction's outputs a block (the kernel's COLS_TILE), and the work
#: where it replaces a thread an output: fewer outputs than this, over an axis this long.
COLS_TILE = 8
TILED_OUTPUTS = 1 << 15
TILED_AXIS = 64
_REDUCE_I64 = kernel("reduce", "reduce_i64")
_ARGMAX = {"float32": kernel("reduce", "argmax_f32"), "int64": kernel("reduce", "argmax_i64")}
_SOFTMAX = kernel("reduce", "softmax_f32")


class BaseOps:
    """The API 1.0 capabilities (indexing lives in ops.index)."""

    kernels: Launcher
    device: _native.Device

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> _native.Buffer:
        array = np.ascontiguousarray(array)
        name = "bool" if array.dtype == np.bool_ else str(array.dtype)
        element(name)
        if array.nbytes >= ZERO_SCAN_BYTES and _all_zero_bytes(array):
            # zeros / zeros_like / full(0): a device memset, nothing copied up.
            out = self.kernels.alloc(array.shape, name)
            self.device.zero(out)
            return out
        buf = self.kernels.upload(array, name)
        if name == "int64":
            self.kernels.remember_indices(buf, array)
        return buf

    def to_numpy(self, x: _native.Buffer, shape: Shape, dtype: DType) -> np.ndarray:
        raw = self.device.download(x, 0, count(shape) * itemsize(dtype))
        out = raw.view(dtype.numpy).reshape(shape)
        out.flags.writeable = False
        return out

    def reshape(self, x: _native.Buffer, shape: Shape, new_shape: Shape) -> _native.Buffer:
        return x

    def assign(self, dst: _native.Buffer, src: _native.Buffer, shape: Shape, dtype: DType) -> None:
        self.kernels.forget_indices(dst)
        self.device.copy(dst, 0, src, 0, count(shape) * itemsize(dtype))

    def astype(self, x: _native.Buffer, shape: Shape, src: DType, dst: DType) -> _native.Buffer:
        return self._convert(x, shape, src.value, dst.value)

    def _convert(self, x: _native.Buffer, shape: Shape, src: str, dst: str) -> _native.Buffer:
        """A converted copy; dtypes by name, so storages riftco-tensor may not name yet
        (bfloat16) convert too."""
        n = count(shape)
        out = self.kernels.alloc(shape, dst)
        self.kernels.launch(_CONVERT, n, [x, out, n, element(src)[1], element(dst)[1]])
        return out

    # -- layout ---------------------------------------------------------------
    def copy_strided(
        self,
        x: _native.Buffer,
        shape: Shape,
        dtype: DType,
        out_shape: Shape,
        strides: Sequence[int],
        offset: int,
    ) -> _native.Buffer:
        n = count(out_shape)
        out = self.kernels.alloc(out_shape, dtype)
        merged, (st,) = coalesce(out_shape, strides)
        self.kernels.launch(
            _COPY_STRIDED[itemsize(dtype)],
            n,
            [x, out, n, dims(merged, 1), dims(st, 0), len(merged), int(offset)],
        )
        return out

    def concat(
        self, xs: Sequence[_native.Buffer], shapes: Sequence[Shape], dtype: DType, axis: int
    ) -> _native.Buffer:
        total = sum(int(s[axis]) for s in shapes)
        out_shape = (*shapes[0][:axis], total, *shapes[0][axis + 1 :])
        out = self.kernels.alloc(out_shape, dtype)
        if len(xs) >= _PLACE_MANY_FROM:
            outer, _, inner = outer_inner(out_shape, axis)
            starts = np.cumsum([0, *(int(s[axis]) for s in shapes)])
            table = np.array([x.ptr for x in xs], dtype=np.uint64).view(np.int64)
            table_buf = self.kernels.upload(np.concatenate([table, starts]), "int64")
            self.kernels.launch(
                _PLACE_MANY[itemsize(dtype)],
                outer * total * inner,
                [table_buf, len(xs), out, outer, total, inner],
            )
            return out
        first = 0
        for x, shape in zip(xs, shapes):
            outer, rows, inner = outer_inner(shape, axis)
            n = outer * rows * inner
            self.kernels.launch(
                _PLACE[itemsize(dtype)], n, [x, out, outer, rows, inner, total, first]
            )
            first += rows
        return out

    # -- elementwise ----------------------------------------------------------
    def unary(self, op: str, x: _native.Buffer, shape: Shape, dtype: DType) -> _native.Buffer:
        n = count(shape)
        out = self.kernels.alloc(shape, dtype)
        if op == "logical_not":
            self.kernels.launch(_NOT, n, [x, out, n])
        elif dtype is DType.float32:
            self.kernels.launch(_UNARY_F32, n, [x, out, n, code(codes.UNARY, "unary", op)])
        elif dtype is DType.bfloat16:
            self.kernels.launch(_UNARY_BF16, n, [x, out, n, code(codes.UNARY, "unary", op)])
        elif dtype is DType.int64 and op in ("neg", "abs"):
            self.kernels.launch(_UNARY_I64, n, [x, out, n, code(codes.UNARY, "unary", op)])
        else:
            raise CudaDTypeError(
                f"unary {op!r} on cuda takes float32 or bfloat16 (int64: neg, abs), found "
                f"{dtype.value}"
            )
        return out

    def _broadcast_args(self, out_shape: Shape, *shapes: Shape) -> list:
        merged, strides = coalesce(out_shape, *(broadcast_strides(s, out_shape) for s in shapes))
        return [dims(merged, 1), *(dims(s, 0) for s in strides), len(merged)]

    def binary(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        require(f"binary {op!r}", dtype, "float32", "int64", "bfloat16")
        if dtype is DType.int64 and op in ("div", "pow"):
            raise CudaDTypeError(f"binary {op!r} on cuda takes float32 or bfloat16, found int64")
        n = count(out_shape)
        out = self.kernels.alloc(out_shape, dtype)
        args = self._broadcast_args(out_shape, a_shape, b_shape)
        op_code = code(codes.BINARY, "binary", op)
        self.kernels.launch(_BINARY[dtype.value], n, [a, b, out, n, op_code, *args])
        return out

    def compare(self, op, a, a_shape, b, b_shape, out_shape, dtype):
        require(f"compare {op!r}", dtype, "float32", "int64", "bool", "uint8", "bfloat16")
        n = count(out_shape)
        out = self.kernels.alloc(out_shape, DType.bool)
        args = self._broadcast_args(out_shape, a_shape, b_shape)
        op_code = code(codes.COMPARISONS, "compare", op)
        self.kernels.launch(_COMPARE[dtype.value], n, [a, b, out, n, op_code, *args])
        return out

    def where(self, cond, cond_shape, a, a_shape, b, b_shape, out_shape, dtype):
        n = count(out_shape)
        out = self.kernels.alloc(out_shape, dtype)
        args = self._broadcast_args(out_shape, cond_shape, a_shape, b_shape)
        self.kernels.launch(_WHERE[itemsize(dtype)], n, [cond, a, b, out, n, *args])
        if dtype is DType.int64:
            known_a = self.kernels.host_candidates(a)
            known_b = self.kernels.host_candidates(b)
            if known_a is not None and known_b is not None:
                both = np.concatenate([known_a, known_b])
                self.kernels.remember_indices(out, both, exact=False)
        return out

    # -- reductions -----------------------------------------------------------
    def reduce(self, op, x, shape, dtype, axis):
        outer, n, inner = outer_inner(shape, axis)
        out_shape = (*shape[:axis], *shape[axis + 1 :])
        out = self.kernels.alloc(out_shape, dtype)
        op_code = code(codes.REDUCTIONS, "reduce", op)
        if dtype is DType.int64:
            if op not in ("sum", "max", "min"):
                raise CudaDTypeError(f"reduce {op!r} on cuda takes float32, found int64")
            self.kernels.launch(_REDUCE_I64, outer * inner, [x, out, outer, n, inner, op_code])
        else:
            require(f"reduce {op!r}", dtype, "float32")
            if inner == 1:
                self.kernels.rows(_REDUCE_ROWS, outer, [x, out, outer, n, op_code])
            elif (
                outer * inner < TILED_OUTPUTS
                and n >= TILED_AXIS
                and self.kernels.block >= 2 * COLS_TILE
            ):
                tiles = outer * -(-inner // COLS_TILE)
                self.kernels.rows(_REDUCE_COLS_TILED, tiles, [x, out, outer, n, inner, op_code])
            else:
                self.kernels.launch(_REDUCE_COLS, outer * inner, [x, out, outer, n, inner, op_code])
        return out

    def argmax(self, x, shape, dtype, axis):
        require("argmax", dtype, "float32", "int64")
        outer, n, inner = outer_inner(shape, axis)
        out = self.kernels.alloc((*shape[:axis], *shape[axis + 1 :]), DType.int64)
        self.kernels.launch(_ARGMAX[dtype.value], outer * inner, [x, out, outer, n, inner])
        return out

    def softmax(self, x, shape, causal, log):
        float32_only("softmax", x)
        s = int(shape[-1]) if shape else 1
        t = int(shape[-2]) if len(shape) >= 2 else 1
        rows = count(shape[:-1])
        out = self.kernels.alloc(shape, DType.float32)
        self.kernels.rows(_SOFTMAX, rows, [x, out, rows, s, t, int(causal), int(log)])
        return out

    # -- linear algebra -------------------------------------------------------
    def matmul(self, a, a_shape, b, b_shape, transpose_a, transpose_b):
        dtype = a.dtype
        if dtype not in ("float32", "bfloat16") or b.dtype != dtype:
            raise CudaDTypeError(
                f"matmul on cuda takes float32 or bfloat16 operands of one dtype, found "
                f"{a.dtype} and {b.dtype}"
            )
        return self._product(a, a_shape, b, b_shape, transpose_a, transpose_b, "float32")

    def matmul_compute(self, a, a_shape, b, b_shape, transpose_a, transpose_b, compute):
        # One cuBLAS call reads the float32 operands and multiplies their bfloat16
        # roundings on the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF): no convert
        # passes, the bits of converting first.
        if a.dtype != "float32" or b.dtype != "float32" or compute is not DType.bfloat16:
            raise CudaDTypeError(
                f"matmul_compute on cuda takes float32 operands and a bfloat16 compute "
                f"dtype, found {a.dtype}, {b.dtype} and {compute}"
            )
        return self._product(a, a_shape, b, b_shape, transpose_a, transpose_b, "bfloat16")

    def _product(self, a, a_shape, b, b_shape, transpose_a, transpose_b, compute):
        dtype = a.dtype
        m, k = (a_shape[-1], a_shape[-2]) if transpose_a else (a_shape[-2], a_shape[-1])
        n = b_shape[-2] if transpose_b else b_shape[-1]
        batch_a, batch_b = tuple(a_shape[:-2]), tuple(b_shape[:-2])
        batch = tuple(np.broadcast_shapes(batch_a, batch_b))
        out = self.kernels.alloc((*batch, m, n), "float32")
        if m == 0 or n == 0 or count(batch) == 0:
            return out
        size_a, size_b, size_c = m * k, k * n, m * n
        ld_a = m if transpose_a else k
        ld_b = k if transpose_b else n
        if k == 0:
            self.device.zero(out)
            return out
        plans = _batch_plan(batch_a, batch_b, batch)
        for a_first, b_first, c_first, a_step, b_step, runs in plans:
            # Column-major C^T[n, m] = op(B)^T op(A)^T: B is cuBLAS's first operand.
            # bfloat16 operands: exact products, float32 sums, a float32 C (tensor
            # cores where cuBLAS has them for this compute type).
            self.device.gemm(
                dtype,
                n,
                m,
                k,
                (b, b_first * size_b, ld_b, b_step * size_b, bool(transpose_b)),
                (a, a_first * size_a, ld_a, a_step * size_a, bool(transpose_a)),
                (out, c_first * size_c, n, size_c, False),
                runs,
                compute,
            )
        return out


def _all_zero_bytes(array: np.ndarray) -> bool:
    """Every byte zero (so +0.0, never -0.0): a few samples first, the scan only when
    they are all zero."""
    raw = array.reshape(-1).view(np.uint8)
    n = raw.size
    if raw[:64].any() or raw[-64:].any() or raw[n // 2 : n // 2 + 64].any():
        return False
    words = raw[: n - n % 8].view(np.uint64)
    return not (words.any() or raw[n - n % 8 :].any())


def _batch_plan(
    batch_a: tuple[int, ...], batch_b: tuple[int, ...], batch: tuple[int, ...]
) -> list[tuple[int, int, int, int, int, int]]:
    """Strided-batched calls covering ``batch``: ``(first a, first b, first c, a step,
    b step, count)`` in matrices. One call when each operand's batch is the whole
    batch or a single matrix; otherwise one call per run of the last batch axis."""
    total = count(batch)
    na, nb = count(batch_a), count(batch_b)
    # A batch that broadcasts to `batch` with as many matrices is `batch` itself.
    if na in (1, total) and nb in (1, total):
        return [(0, 0, 0, int(na == total and total > 1), int(nb == total and total > 1), total)]
    sa = broadcast_strides(batch_a, batch)
    sb = broadcast_strides(batch_b, batch)
    last = batch[-1]
    plans = []
    for i in range(total // last):
        index = np.unravel_index(i * last, batch)
        fa = sum(int(x) * s for x, s in zip(index, sa))
        fb = sum(int(x) * s for x, s in zip(index, sb))
        plans.append((fa, fb, i * last, sa[-1], sb[-1], last))
    return plans


__all__ = ["BaseOps"]
