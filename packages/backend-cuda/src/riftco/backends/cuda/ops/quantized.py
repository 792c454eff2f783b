"""NF4 quantized weights: dequantize, and the linear layer forward and backward
with the weight decoded inside the kernel. Inputs and gradients are float32 only
(a bfloat16 one is refused with a DTypeError)."""

from __future__ import annotations

from riftco.backends.cuda import _native
from riftco.backends.cuda.ops.launch import Launcher, count, float32_only, kernel
from riftco.tensor.plugin import Shape

_DEQUANTIZE = kernel("nf4", "nf4_dequantize_f32")
_LINEAR = kernel("nf4", "nf4_linear_f32")
_LINEAR_BACKWARD = kernel("nf4", "nf4_linear_backward_f32")


class QuantizedOps:
    kernels: Launcher
    device: _native.Device

    def nf4_dequantize(
        self, codes, absmax, group_range, offset: float, w_shape: Shape, block_size: int
    ):
        n = count(w_shape)
        out = self.kernels.alloc(w_shape, "float32")
        self.kernels.launch(
            _DEQUANTIZE, n, [codes, absmax, group_range, float(offset), int(block_size), out, n]
        )
        return out

    def nf4_linear(
        self,
        x,
        x_shape: Shape,
        codes,
        absmax,
        group_range,
        offset: float,
        w_shape: Shape,
        block_size: int,
        bias,
    ):
        float32_only("nf4_linear", x, bias)
        rows, cols = int(w_shape[0]), int(w_shape[1])
        m = count(x_shape[:-1])
        y = self.kernels.alloc((*x_shape[:-1], rows), "float32")
        self.kernels.launch(
            _LINEAR,
            m * rows,
            [x, codes, absmax, group_range, float(offset), int(block_size), bias, y, m, rows, cols],
        )
        return y

    def nf4_linear_backward(
        self,
        dy,
        dy_shape: Shape,
        codes,
        absmax,
        group_range,
        offset: float,
        w_shape: Shape,
        block_size: int,
    ):
        float32_only("nf4_linear_backward", dy)
        rows, cols = int(w_shape[0]), int(w_shape[1])
        m = count(dy_shape[:-1])
        dx = self.kernels.alloc((*dy_shape[:-1], cols), "float32")
        self.kernels.launch(
            _LINEAR_BACKWARD,
            m * cols,
            [dy, codes, absmax, group_range, float(offset), int(block_size), dx, m, rows, cols],
        )
        return dx
