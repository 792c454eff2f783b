"""The fused, all-or-nothing Adam / AdamW update, over contiguous or paged moments,
and the clipped step (API 1.8 ``clipped_adam_update``): the gradient norm, the clip
scale and the update on the device, read back once."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops.launch import MAX_BLOCKS, Launcher, float32_only, kernel

_CHECK = kernel("optim", "adam_check")
_COMMIT = kernel("optim", "adam_commit")
_SS_PARTIAL = kernel("optim", "ss_partial")
_CLIP_GATE = kernel("optim", "clip_gate")

#: Elements of a gradient-norm chunk (one block's share) at the least; a gradient of
#: more than CHUNK_MIN * CHUNKS_MAX elements takes CHUNKS_MAX larger chunks, so the
#: gate's per-gradient sums stay short. Both depend on a gradient's size alone.
CHUNK_MIN = 1 << 16
CHUNKS_MAX = 64
#: Parameters a clipped step takes at most (its exact norm sum holds 2^16 floats; its
#: outcome travels as a float32).
CLIPPED_MAX = 1 << 16


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

    def _adam_layout(
        self,
        op: str,
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
    ) -> tuple[list[list[int]], np.ndarray]:
        """The segments (one per moment page) and the coefficients [n * 10 + 2] of
        an update (the last two: the scale the kernels multiply by and the gate)."""
        n = len(params)
        lists = (grads, m, v, sizes, lr, beta1, beta2, eps, weight_decay, step)
        if any(len(x) != n for x in lists):
            raise CudaError(
                f"{op}: expected {n} entries everywhere, found {[len(x) for x in lists]}"
            )
        if page_size < 1:
            raise CudaError(f"{op}: expected a page size of at least 1, found {page_size}")
        segments: list[list[int]] = []
        coef = np.zeros(n * 10 + 2, dtype=np.float32)
        coef[n * 10 :] = 1.0
        for i in range(n):
            size = int(sizes[i])
            if int(step[i]) < 1:
                raise CudaError(f"{op}: step counts from 1, found {step[i]} for parameter {i}")
            pages_m, pages_v = list(m[i]), list(v[i])
            expected = max(1, -(-size // page_size))
            if len(pages_m) != expected or len(pages_v) != expected:
                raise CudaError(
                    f"{op}: parameter {i} of {size} elements needs {expected} moment "
                    f"pages of {page_size}, found {len(pages_m)} and {len(pages_v)}"
                )
            float32_only(op, params[i], grads[i], *pages_m, *pages_v)
            for buf in (params[i], grads[i]):
                if buf.nbytes < 4 * size:
                    raise CudaError(f"{op}: parameter {i} holds fewer than {size} elements")
            with np.errstate(over="ignore"):  # an infinite coefficient: its update is flagged
                coef[i * 10 : i * 10 + 10] = coefficients(
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
                        f"{op}: moment page {j} of parameter {i} must hold {elements} "
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
        return segments, coef

    def _adam_passes(
        self,
        segments: list[list[int]],
        seg_buf: _native.Buffer | int | None,
        coef_buf: _native.Buffer,
        n: int,
        bad: _native.Buffer | None,
        status: _native.Buffer | int | None,
    ) -> None:
        """The check and commit passes (commit also finds the first flagged parameter);
        an int is a device address (a table or a result inside a larger buffer)."""
        flags = self.device.alloc(4 * n, "uint32")
        self.device.zero(flags)
        block = self.kernels.block
        longest = max((s[4] for s in segments), default=0)
        grid = (
            max(1, min(-(-longest // block), 1024)),
            max(1, min(len(segments), MAX_BLOCKS - 1)),
            1,
        )
        if segments:
            self.device.launch(
                _CHECK.module,
                _CHECK.name,
                grid,
                (block, 1, 1),
                0,
                [seg_buf, coef_buf, flags, len(segments), n],
            )
        self.device.launch(
            _COMMIT.module,
            _COMMIT.name,
            grid,
            (block, 1, 1),
            0,
            [seg_buf, coef_buf, flags, len(segments), n, bad, status],
        )

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
        segments, coef = self._adam_layout(
            "adam_update", params, grads, m, v, sizes, page_size, lr, beta1, beta2, eps,
            weight_decay, decoupled, step, grad_scale,
        )  # fmt: skip
        if n == 0:
            return None
        bad = self.device.alloc(8, "int64")  # the commit pass always writes it
        seg_buf = None
        if segments:
            table = np.array(segments, dtype=np.uint64).view(np.int64)
            seg_buf = self.kernels.upload(table, "int64")
        coef_buf = self.kernels.upload(coef, "float32")
        self._adam_passes(segments, seg_buf, coef_buf, n, bad, None)
        return self.kernels.first_bad(bad)

    def clipped_adam_update(
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
        max_grad_norm: float | None,
        values: Sequence,
    ) -> tuple[list[float], list[float], bool, int | None]:
        """Sums of squares (ss_partial, clip_gate: two launches over one table of
        every gradient), the scale on the device, check and commit, and one read of
        the sums, the values and the outcome together."""
        n, k = len(params), len(values)
        if n > CLIPPED_MAX:
            raise CudaError(f"clipped_adam_update: at most {CLIPPED_MAX} parameters, found {n}")
        if max_grad_norm is not None and not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
            raise CudaError(
                f"clipped_adam_update: max_grad_norm must be positive and finite, found "
                f"{max_grad_norm!r}"
            )
        segments, coef = self._adam_layout(
            "clipped_adam_update", params, grads, m, v, sizes, page_size, lr, beta1, beta2,
            eps, weight_decay, decoupled, step, 1.0,
        )  # fmt: skip
        for j, value in enumerate(values):
            float32_only("clipped_adam_update", value)
            if value.nbytes < 4:
                raise CudaError(f"clipped_adam_update: value {j} holds no element")
        if n == 0 and k == 0:
            return [], [], True, None
        # One int64 table: the gradients' chunks [n, 4], the values' addresses [k], the
        # segments [s, 6].
        chunk_rows, chunks = [], 0
        for i in range(n):
            size = int(sizes[i])
            per = max(CHUNK_MIN, -(-size // CHUNKS_MAX))
            per = -(-per // 1024) * 1024
            chunk_rows.append([grads[i].ptr, size, chunks, per])
            chunks += max(1, -(-size // per))
        rows = [np.array(chunk_rows, dtype=np.uint64).reshape(-1)]
        rows.append(np.array([value.ptr for value in values], dtype=np.uint64))
        rows.append(np.array(segments, dtype=np.uint64).reshape(-1))
        table = self.kernels.upload(np.concatenate(rows).view(np.int64), "int64")
        coef_buf = self.kernels.upload(coef, "float32")
        out = self.device.alloc(4 * (n + k + 1), "float32")
        tail = coef_buf.ptr + 4 * 10 * n
        values_at, segments_at = table.ptr + 8 * 4 * n, table.ptr + 8 * (4 * n + k)
        bits = int(
            np.array([math.inf if max_grad_norm is None else max_grad_norm]).view(np.int64)[0]
        )
        if n:
            partial = self.device.alloc(8 * chunks, "int64")
            self.device.launch(
                _SS_PARTIAL.module,
                _SS_PARTIAL.name,
                (min(chunks, MAX_BLOCKS), 1, 1),
                (self.kernels.block, 1, 1),
                0,
                [table, n, chunks, partial],
            )
        else:
            partial = table
        self.device.launch(
            _CLIP_GATE.module,
            _CLIP_GATE.name,
            (1, 1, 1),
            (self.kernels.block, 1, 1),
            0,
            [table, n, chunks, partial, values_at, k, bits, out, tail],
        )
        if n:
            self._adam_passes(segments, segments_at, coef_buf, n, None, out.ptr + 4 * (n + k))
        host = self.device.download(out, 0, 4 * (n + k + 1)).view(np.float32).tolist()
        sums, read, outcome = host[:n], host[n : n + k], host[n + k]
        if outcome > 0:
            return sums, read, True, None
        if outcome == 0:
            return sums, read, False, None
        return sums, read, False, int(-outcome) - 1
