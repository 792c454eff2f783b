"""Fused neural-network kernels: layer and RMS norms, activation gradients,
cross-entropy, rotary embeddings."""

from __future__ import annotations

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops import codes
from riftco.backends.cuda.ops.launch import Launcher, code, count, float32_only, kernel
from riftco.tensor.plugin import Shape

#: Rows a thread sums per partial of a parameter gradient (then chunks in order); a
#: layer norm's backward runs a block per chunk (GPT-2 124M at B=4, T=1024: 128 blocks).
PARAM_CHUNK = 32

_LAYER_NORM = kernel("norm", "layer_norm_f32")
_ADD_LAYER_NORM = kernel("norm", "add_layer_norm_f32")
_LAYER_NORM_BACKWARD = kernel("norm", "layer_norm_backward_f32")
_RMS_NORM = kernel("norm", "rms_norm_f32")
_RMS_NORM_DX = kernel("norm", "rms_norm_dx_f32")
_PARAM_GRADS = kernel("norm", "norm_param_grads_f32")
_ACTIVATION_BACKWARD = kernel("norm", "activation_backward_f32")
_CROSS_ENTROPY = kernel("loss", "cross_entropy_f32")
_CROSS_ENTROPY_BACKWARD = kernel("loss", "cross_entropy_backward_f32")
_CROSS_ENTROPY_MEAN = kernel("loss", "cross_entropy_mean_f32")
_ROTARY = kernel("loss", "rotary_f32")
_CHECK_INDICES = kernel("index", "check_indices")
_NO_UPPER_BOUND = (1 << 63) - 1


def _rows(shape: Shape) -> tuple[int, int]:
    return count(shape[:-1]), int(shape[-1])


class NnOps:
    kernels: Launcher
    device: _native.Device

    def _param_grads(
        self, dy, x, mean, rstd, rows: int, d: int, weight: bool, bias: bool
    ) -> tuple[_native.Buffer | None, _native.Buffer | None]:
        """The weight (sum over rows of dy * xhat) and bias (of dy) gradients in fixed
        chunks, then the chunks in order: one launch for both."""
        if not weight and not bias:
            return None, None
        both = weight and bias
        what = 2 if both else (0 if weight else 1)
        chunks = max(1, (rows + PARAM_CHUNK - 1) // PARAM_CHUNK)
        outs = [self.kernels.alloc((d,), "float32") for _ in range(2 if both else 1)]
        if rows == 0:
            for out in outs:
                self.device.zero(out)
        else:
            partial = self.device.alloc(len(outs) * chunks * d * 8, "float64")
            second = outs[1] if both else None
            self.kernels.launch(
                _PARAM_GRADS,
                chunks * d,
                [dy, x, mean, rstd, partial, outs[0], second, self.kernels.counter()]
                + [rows, d, PARAM_CHUNK, what],
            )
        if both:
            return outs[0], outs[1]
        return (outs[0], None) if weight else (None, outs[0])

    def layer_norm(self, x, shape: Shape, weight, bias, eps: float):
        float32_only("layer_norm", x, weight, bias)
        rows, d = _rows(shape)
        y = self.kernels.alloc(shape, "float32")
        mean = self.kernels.alloc(shape[:-1], "float32")
        rstd = self.kernels.alloc(shape[:-1], "float32")
        self.kernels.rows(
            _LAYER_NORM,
            rows,
            [
                x,
                weight,
                bias,
                y,
                mean,
                rstd,
                rows,
                d,
                float(eps),
                int(weight is not None),
                int(bias is not None),
            ],
        )
        return y, mean, rstd

    def add_layer_norm(self, x, r, shape: Shape, weight, bias, eps: float):
        float32_only("add_layer_norm", x, r, weight, bias)
        rows, d = _rows(shape)
        s = self.kernels.alloc(shape, "float32")
        y = self.kernels.alloc(shape, "float32")
        mean = self.kernels.alloc(shape[:-1], "float32")
        rstd = self.kernels.alloc(shape[:-1], "float32")
        has = [int(weight is not None), int(bias is not None)]
        self.kernels.rows(
            _ADD_LAYER_NORM, rows, [x, r, weight, bias, s, y, mean, rstd, rows, d, float(eps), *has]
        )
        return s, y, mean, rstd

    def layer_norm_backward(self, dy, x, shape: Shape, weight, mean, rstd, with_bias: bool):
        float32_only("layer_norm_backward", dy, x, weight, mean, rstd)
        rows, d = _rows(shape)
        return self._layer_norm_backward(dy, x, weight, mean, rstd, None, rows, d, with_bias)

    def add_layer_norm_backward(self, dy, ds, x, shape: Shape, weight, mean, rstd, with_bias: bool):
        # The residual's gradient added to each row's dx in the same launch.
        float32_only("add_layer_norm_backward", dy, ds, x, weight, mean, rstd)
        rows, d = _rows(shape)
        return self._layer_norm_backward(dy, x, weight, mean, rstd, ds, rows, d, with_bias)

    def _layer_norm_backward(self, dy, x, weight, mean, rstd, res, rows: int, d: int, bias: bool):
        """dx (plus ``res`` when given) and the weight and bias gradients in one launch
        (``layer_norm_backward_f32``: a block per chunk of ``PARAM_CHUNK`` rows, the last
        block summing the chunks' partials in order)."""
        dx = self.kernels.alloc((rows, d), "float32")
        weighted = weight is not None
        both = weighted and bias
        what = 2 if both else (0 if weighted else (1 if bias else -1))
        outs = [self.kernels.alloc((d,), "float32") for _ in range(2 if both else int(what >= 0))]
        if rows == 0 or d == 0:
            for out in outs:
                self.device.zero(out)
        else:
            chunks = (rows + PARAM_CHUNK - 1) // PARAM_CHUNK
            partial = self.device.alloc(len(outs) * chunks * d * 8, "float64") if outs else None
            self.kernels.rows(
                _LAYER_NORM_BACKWARD,
                chunks,
                [dy, x, weight, mean, rstd, res, dx, partial, outs[0] if outs else None]
                + [outs[1] if both else None, self.kernels.counter(), rows, d, int(weighted)]
                + [PARAM_CHUNK, what],
            )
        dw = outs[0] if weighted else None
        db = (outs[1] if both else outs[0]) if bias else None
        return dx, dw, db

    def rms_norm(self, x, shape: Shape, weight, eps: float):
        float32_only("rms_norm", x, weight)
        rows, d = _rows(shape)
        y = self.kernels.alloc(shape, "float32")
        rstd = self.kernels.alloc(shape[:-1], "float32")
        self.kernels.rows(
            _RMS_NORM, rows, [x, weight, y, rstd, rows, d, float(eps), int(weight is not None)]
        )
        return y, rstd

    def rms_norm_backward(self, dy, x, shape: Shape, weight, rstd):
        float32_only("rms_norm_backward", dy, x, weight, rstd)
        rows, d = _rows(shape)
        dx = self.kernels.alloc(shape, "float32")
        self.kernels.rows(
            _RMS_NORM_DX, rows, [dy, x, weight, rstd, dx, rows, d, int(weight is not None)]
        )
        dw, _ = self._param_grads(dy, x, None, rstd, rows, d, weight is not None, False)
        return dx, dw

    def activation_backward(self, op: str, x, dy, shape: Shape):
        float32_only("activation_backward", x, dy)
        op_code = code(codes.ACTIVATIONS, "activation_backward", op)
        n = count(shape)
        dx = self.kernels.alloc(shape, "float32")
        self.kernels.launch(_ACTIVATION_BACKWARD, n, [x, dy, dx, n, op_code])
        return dx

    def _loss_rows(self, op: str, k, shape: Shape, targets, ignore_index: int, args: list):
        """A loss kernel over the rows, its arguments ``args + [rows, classes, ignore,
        flag]``: targets the host knows are checked there (the CPU's wording, no read),
        others flagged on the device and the flag read back."""
        rows, classes = int(shape[0]), int(shape[1])
        known = self.kernels.host_candidates(targets)
        bad = None
        if known is not None:
            bad = (known != int(ignore_index)) & ((known < 0) | (known >= classes))
            if bad.any() and self.kernels.host_indices(targets) is None:
                known = None  # a candidate is bad: the device finds whether one is used
        if known is not None and bad is not None:
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                raise CudaError(
                    f"{op}: target {int(known[first])} of row {first} is out of range for "
                    f"{classes} classes (ignore index {ignore_index})"
                )
            flag = self.kernels.quiet_flag()
        else:
            flag = self.kernels.flag()
        self.kernels.rows(k, rows, [*args, rows, classes, int(ignore_index), flag])
        if known is None:
            row = self.kernels.first_bad(flag)
            if row is not None:
                target = self.kernels.read_i64(targets, row)
                raise CudaError(
                    f"{op}: target {target} of row {row} is out of range for {classes} "
                    f"classes (ignore index {ignore_index})"
                )

    def cross_entropy(self, logits, shape: Shape, targets, ignore_index: int):
        float32_only("cross_entropy", logits)
        rows = int(shape[0])
        losses = self.kernels.alloc((rows,), "float32")
        lse = self.kernels.alloc((rows,), "float32")
        self._loss_rows(
            "cross_entropy", _CROSS_ENTROPY, shape, targets, ignore_index,
            [logits, targets, losses, lse],
        )  # fmt: skip
        return losses, lse

    def cross_entropy_mean(self, logits, shape: Shape, targets, ignore_index: int):
        # API 1.15: the rows' losses and, in the same launch, the last block to finish
        # takes their mean over the kept rows (no count, sum or scale passes).
        float32_only("cross_entropy_mean", logits)
        rows = int(shape[0])
        losses = self.kernels.alloc((rows,), "float32")
        lse = self.kernels.alloc((rows,), "float32")
        loss = self.kernels.alloc((), "float32")
        scale = self.kernels.alloc((), "float32")
        self._loss_rows(
            "cross_entropy", _CROSS_ENTROPY_MEAN, shape, targets, ignore_index,
            [logits, targets, losses, lse, loss, scale, self.kernels.counter()],
        )  # fmt: skip
        return loss, lse, scale

    def _loss_gradient(self, logits, shape: Shape, targets, lse, grads, ignore_index: int):
        rows, classes = int(shape[0]), int(shape[1])
        dlogits = self.kernels.alloc(shape, "float32")
        self.kernels.launch(
            _CROSS_ENTROPY_BACKWARD,
            rows * classes,
            [logits, targets, lse, *grads, dlogits, rows, classes, int(ignore_index)],
        )
        return dlogits

    def cross_entropy_backward(self, logits, shape: Shape, targets, lse, grad, ignore_index: int):
        float32_only("cross_entropy_backward", logits, lse, grad)
        return self._loss_gradient(logits, shape, targets, lse, (grad, None, None), ignore_index)

    def cross_entropy_mean_backward(
        self, logits, shape: Shape, targets, lse, grad, scale, ignore_index: int
    ):
        # API 1.15: every row's gradient grad * scale taken in the kernel (no product
        # and broadcast passes).
        float32_only("cross_entropy_mean_backward", logits, lse, grad, scale)
        return self._loss_gradient(logits, shape, targets, lse, (None, grad, scale), ignore_index)

    def rotary(self, x, shape: Shape, positions, theta: float, inverse: bool):
        float32_only("rotary", x)
        rows, heads, dh = count(shape[:-2]), int(shape[-2]), int(shape[-1])
        known = self.kernels.host_indices(positions)
        if known is not None:
            if (known[:rows] < 0).any():
                first = int(np.flatnonzero(known[:rows] < 0)[0])
                raise CudaError(f"rotary: position {int(known[first])} of row {first} is negative")
        else:
            flag = self.kernels.flag()
            self.kernels.launch(_CHECK_INDICES, rows, [positions, rows, _NO_UPPER_BOUND, flag])
            row = self.kernels.first_bad(flag)
            if row is not None:
                position = self.kernels.read_i64(positions, row)
                raise CudaError(f"rotary: position {position} of row {row} is negative")
        y = self.kernels.alloc(shape, "float32")
        self.kernels.launch(
            _ROTARY,
            rows * heads * (dh // 2),
            [x, positions, y, rows, heads, dh, float(theta), int(inverse)],
        )
        return y


__all__ = ["NnOps"]
