"""Linear layers with their bias in the product (cuBLASLt epilogues).

``linear`` is ``x @ w.T + bias`` as one cuBLASLt product with
``CUBLASLT_EPILOGUE_BIAS``: the bias is added to the float32 sums before the float32
result is written, the same arithmetic as a product followed by an add (the bits the
op-by-op route gives). ``linear_backward`` gives ``dx``, ``dw`` and the bias gradient
``db`` (the column sum of the float32 gradient):

- float32 operands: ``db`` comes from the weight-gradient product itself
  (``CUBLASLT_EPILOGUE_BGRADB``, the sum over the product's ``k`` axis of its ``B``
  operand, the gradient). cuBLASLt's order of that sum is its own: float32
  accumulation on a GPU, so ``db`` is within ``n * 2**-24 * sum |g|`` of the exact
  sum (the float64-accumulated reduction of the op-by-op route is within one float32
  rounding of it). The emulation sums in float64 and rounds once.
- bfloat16 operands: the bias gradient must sum the float32 gradient, not the
  bfloat16 copy the products read, so the epilogue does not apply. One kernel
  (``colsum_to_bf16``) writes that copy and sums the float32 values in the tiled
  column reduction's order (the op-by-op bits) in one pass instead of two.
- float32 operands with a bfloat16 ``compute`` dtype (``matmul_compute``'s rule: the
  products of their bfloat16 roundings): the forward bias epilogue on a
  ``CUBLAS_COMPUTE_32F_FAST_16BF`` product (cuBLAS rounds as it reads); backward the
  two ``matmul_compute`` products and the tiled reduction of the float32 gradient
  (an epilogue of a FAST_16BF product is not documented to sum the unrounded
  gradient).

Every product's algorithm is chosen once per shape and never splits ``k``
(riftco_cuda::cublaslt): the same inputs give the same bits every call.
"""

from __future__ import annotations

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaDTypeError
from riftco.backends.cuda.ops import base
from riftco.backends.cuda.ops.launch import Launcher, kernel
from riftco.tensor.plugin import DType, Shape

_COLSUM_TO_BF16 = kernel("reduce", "colsum_to_bf16")


class LinearOps:
    """``linear`` and ``linear_backward`` (products with fused bias epilogues)."""

    kernels: Launcher
    device: _native.Device

    def _fused_colsum(self, rows: int, cols: int) -> bool:
        """Whether the op-by-op bias gradient of ``[rows, cols]`` is the tiled column
        reduction (``colsum_to_bf16`` has its order; elsewhere the two passes stay)."""
        return (
            cols < base.TILED_OUTPUTS
            and rows >= base.TILED_AXIS
            and self.kernels.block >= 2 * base.COLS_TILE
        )

    def linear(
        self,
        x: _native.Buffer,
        x_shape: Shape,
        w: _native.Buffer,
        w_shape: Shape,
        bias: _native.Buffer | None,
        compute: DType | None = None,
    ) -> _native.Buffer:
        rows, inner = int(x_shape[0]), int(x_shape[1])
        out_features = int(w_shape[0])
        _check("linear", x, w, bias)
        fast = _bf16_products(x, compute)
        if bias is None or rows == 0 or out_features == 0 or inner == 0:
            product = self.matmul_compute if fast else self.matmul  # type: ignore[attr-defined]
            extra = (DType.bfloat16,) if fast else ()
            y = product(x, x_shape, w, w_shape, False, True, *extra)
            if bias is None:
                return y
            return self.binary(  # type: ignore[attr-defined]
                "add", y, (rows, out_features), bias, (out_features,), (rows, out_features),
                DType.float32,
            )  # fmt: skip
        y = self.kernels.alloc((rows, out_features), DType.float32)
        # Column-major y^T[out, rows] = w (read transposed) x^T, the bias one value per
        # row of y^T: cuBLASLt's bias vector.
        self.device.gemm_epilogue(
            x.dtype,
            out_features,
            rows,
            inner,
            (w, 0, inner, True),
            (x, 0, inner, False),
            (y, 0, out_features, False),
            "bias",
            (bias, 0),
            *(("bfloat16",) if fast else ()),
        )
        return y

    def linear_backward(
        self,
        g: _native.Buffer,
        x: _native.Buffer,
        x_shape: Shape,
        w: _native.Buffer,
        w_shape: Shape,
        need_x: bool,
        need_w: bool,
        need_b: bool,
        compute: DType | None = None,
    ) -> tuple[_native.Buffer | None, _native.Buffer | None, _native.Buffer | None]:
        rows, inner = int(x_shape[0]), int(x_shape[1])
        out_features = int(w_shape[0])
        _check("linear_backward", x, w, None)
        if g.dtype != "float32":
            raise CudaDTypeError(
                f"linear_backward on cuda takes a float32 gradient, found {g.dtype}"
            )
        g_shape = (rows, out_features)
        if _bf16_products(x, compute):
            # float32 operands multiplied as their bfloat16 roundings (cuBLAS rounds as
            # it reads, no copies); the bias gradient sums the float32 gradient, which
            # a FAST_16BF epilogue would not promise: the tiled reduction.
            low = DType.bfloat16
            mm = self.matmul_compute  # type: ignore[attr-defined]
            return (
                mm(g, g_shape, w, w_shape, False, False, low) if need_x else None,
                mm(g, g_shape, x, x_shape, True, False, low) if need_w else None,
                self.reduce("sum", g, g_shape, DType.float32, 0) if need_b else None,  # type: ignore[attr-defined]
            )
        dtype = x.dtype
        db = gl = None
        if dtype == "bfloat16":
            if need_b and self._fused_colsum(rows, out_features) and rows * out_features:
                gl = self.kernels.alloc(g_shape, DType.bfloat16)
                db = self.kernels.alloc((out_features,), DType.float32)
                tiles = -(-out_features // base.COLS_TILE)
                self.kernels.rows(_COLSUM_TO_BF16, tiles, [g, db, gl, rows, out_features])
            else:
                gl = self._convert(g, g_shape, "float32", "bfloat16")  # type: ignore[attr-defined]
        else:
            gl = g
        dx = self.matmul(gl, g_shape, w, w_shape, False, False) if need_x else None  # type: ignore[attr-defined]
        dw = None
        fuse = need_w and need_b and db is None and dtype == "float32" and rows > 0
        if fuse and inner > 0 and out_features > 0:
            dw = self.kernels.alloc((out_features, inner), DType.float32)
            db = self.kernels.alloc((out_features,), DType.float32)
            # Column-major dw^T[in, out] = x^T g: A is x^T (x as stored), B is g read
            # transposed; BGRADB sums op(B) over k (the rows): the bias gradient.
            self.device.gemm_epilogue(
                "float32",
                inner,
                out_features,
                rows,
                (x, 0, inner, False),
                (g, 0, out_features, True),
                (dw, 0, inner, False),
                "bgradb",
                (db, 0),
            )
        elif need_w:
            dw = self.matmul(gl, g_shape, x, x_shape, True, False)  # type: ignore[attr-defined]
        if need_b and db is None:
            db = self.reduce("sum", g, g_shape, DType.float32, 0)  # type: ignore[attr-defined]
        return dx, dw, db if need_b else None


def _bf16_products(x: _native.Buffer, compute: DType | None) -> bool:
    """float32 operands multiplied as their bfloat16 roundings (``compute``)."""
    return compute is not None and DType(compute) is DType.bfloat16 and x.dtype == "float32"


def _check(op: str, x: _native.Buffer, w: _native.Buffer, bias: _native.Buffer | None) -> None:
    if x.dtype not in ("float32", "bfloat16") or w.dtype != x.dtype:
        raise CudaDTypeError(
            f"{op} on cuda takes float32 or bfloat16 operands of one dtype, found {x.dtype} "
            f"and {w.dtype}"
        )
    if bias is not None and bias.dtype != "float32":
        raise CudaDTypeError(f"{op} on cuda takes a float32 bias, found {bias.dtype}")


__all__ = ["LinearOps"]
