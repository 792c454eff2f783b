"""The fused, all-or-nothing Adam / AdamW update, over contiguous or paged moments."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops.launch import MAX_BLOCKS, Launcher, float32_only, kernel

_CHECK = kernel("optim", "adam_check")
_FIRST_BAD = kernel("optim", "adam_first_bad")
_COMMIT = kernel("optim", "adam_commit")


def coefficients(
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    step: int,
    grad_scale: float,
) -> list[float]:
    """The float32 coefficients of one parameter, computed in float64 as the CPU
    kernel does (Python's ``beta ** step``)."""
    bias1 = 1.0 - beta1**step
    bias2 = 1.0 - beta2**step
    return [
        grad_scale,
        0.0 if decoupled else weight_decay,
        1.0 - lr * weight_decay,
        1.0 if decoupled and weight_decay != 0.0 else 0.0,
        1.0 - beta1,
        beta2,
        1.0 - beta2,
        -(lr / bias1),
        math.sqrt(bias2),
        eps,
    ]


class OptimOps:
    kernels: Launcher
    device: _native.Device

    def adam_update(
        self,
        params: Sequence,
        grads: Sequence,
        m: Sequence[Sequence],
        v: Sequence[Sequence],
        sizes: Sequence[int],
        page_size: int,
        lr: Sequence[float],
        beta1: Sequence[float],
        beta2: Sequence[float],
        eps: Sequence[float],
        weight_decay: Sequence[float],
        decoupled: bool,
        step: Sequence[int],
        grad_scale: float,
    ) -> int | None:
        n = len(params)
        lists = (grads, m, v, sizes, lr, beta1, beta2, eps, weight_decay, step)
        if any(len(x) != n for x in lists):
            raise CudaError(
                f"adam_update: expected {n} entries everywhere, found {[len(x) for x in lists]}"
            )
        if n == 0:
            return None
        segments: list[list[int]] = []
        coef = np.zeros((n, 10), dtype=np.float32)
        for i in range(n):
            size = int(sizes[i])
            if int(step[i]) < 1:
                raise CudaError(
                    f"adam_update: step counts from 1, found {step[i]} for parameter {i}"
                )
            if page_size < 1:
                raise CudaError(
                    f"adam_update: expected a page size of at least 1, found {page_size}"
                )
            pages_m, pages_v = list(m[i]), list(v[i])
            expected = max(1, -(-size // page_size))
            if len(pages_m) != expected or len(pages_v) != expected:
                raise CudaError(
                    f"adam_update: parameter {i} of {size} elements needs {expected} moment "
                    f"pages of {page_size}, found {len(pages_m)} and {len(pages_v)}"
                )
            float32_only("adam_update", params[i], grads[i], *pages_m, *pages_v)
            for buf in (params[i], grads[i]):
                if buf.nbytes < 4 * size:
                    raise CudaError(f"adam_update: parameter {i} holds fewer than {size} elements")
            coef[i] = coefficients(
                float(lr[i]),
                float(beta1[i]),
                float(beta2[i]),
                float(eps[i]),
                float(weight_decay[i]),
                bool(decoupled),
                int(step[i]),
                float(grad_scale),
            )
            for j, (pm, pv) in enumerate(zip(pages_m, pages_v)):
                first = j * page_size
                elements = max(0, min(page_size, size - first))
                if pm.nbytes != 4 * elements or pv.nbytes != 4 * elements:
                    raise CudaError(
                        f"adam_update: moment page {j} of parameter {i} must hold {elements} "
                        f"elements, found {pm.nbytes // 4} and {pv.nbytes // 4}"
                    )
                if elements == 0:
                    continue
                segments.append(
                    [
                        params[i].ptr + 4 * first,
                        grads[i].ptr + 4 * first,
                        pm.ptr,
                        pv.ptr,
                        elements,
                        i,
                    ]
                )
        flags = self.device.alloc(4 * n, "uint32")
        self.device.zero(flags)
        bad = self.kernels.flag()
        if segments:
            table = self.kernels.upload(np.array(segments, dtype=np.uint64).view(np.int64), "int64")
            coef_buf = self.kernels.upload(coef, "float32")
            longest = max(s[4] for s in segments)
            block = self.kernels.block
            grid = (min(-(-longest // block), 1024), min(len(segments), MAX_BLOCKS - 1), 1)
            self.device.launch(
                _CHECK.module,
                _CHECK.name,
                grid,
                (block, 1, 1),
                0,
                [table, coef_buf, flags, len(segments)],
            )
            self.device.launch(
                _FIRST_BAD.module, _FIRST_BAD.name, (1, 1, 1), (1, 1, 1), 0, [flags, n, bad]
            )
            self.device.launch(
                _COMMIT.module,
                _COMMIT.name,
                grid,
                (block, 1, 1),
                0,
                [table, coef_buf, bad, len(segments)],
            )
        else:
            self.device.launch(
                _FIRST_BAD.module, _FIRST_BAD.name, (1, 1, 1), (1, 1, 1), 0, [flags, n, bad]
            )
        return self.kernels.first_bad(bad)
