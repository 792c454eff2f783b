"""FlashAttention-2 on the tensor cores (``driver/kernels/flash.cu``): attention
computing in bfloat16 as one launch forward and two backward, the scores and
probabilities kept on the chip.

Taken by ``flash_attention_compute`` / ``flash_attention_backward_compute`` on
bfloat16 q, k and v and by ``projected_attention(_backward)`` in bfloat16 compute
(reading q, k and v straight out of the stacked float32 projection, rounded as they
are staged, and writing dq, dk and dv into the columns of the stacked gradient),
when the GPU has bfloat16 tensor cores (sm_80 and later), the head dimension is one the
kernels are built for, and causal attention has at least as many keys as queries
(grouped-query heads and sliding windows included: a query head reads its group's
key/value head, and dk, dv sum the group's query heads in order). Otherwise the
cuBLAS route or the row kernels run, as before. ``RIFTCO_CUDA_FLASH=0`` keeps the cuBLAS
route (to compare the two on a GPU).

The arithmetic is the API 1.12 compute permission's: bfloat16 q, k, v, output
gradient, probabilities and scores' gradient into float32 sums; the statistics are
the flash statistics every other route writes and reads, so a forward of one route
and a backward of another agree. Each output element is summed by one warp in a
fixed order (no atomics): the same bits run to run."""

from __future__ import annotations

import os

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops.launch import Launcher, kernel

#: The head dimensions the kernels are compiled for.
HEAD_DIMS = (16, 32, 64)
#: Rows of a block's tile (queries forward and for dq, keys for dk and dv) and its threads.
TILE, THREADS = 64, 128
#: The largest grid axis a launch asks for (the kernels loop over the rest).
_MAX_GRID = 65535
#: q, k and v as the kernels read them: float32 (a stacked projection) or bfloat16.
_SOURCE = {"float32": "f32", "bfloat16": "bf16"}
_FORWARD = {
    (src, d): kernel("flash", f"flash_forward_{name}_d{d}")
    for src, name in _SOURCE.items()
    for d in HEAD_DIMS
}
_DQ = {
    (src, d): kernel("flash", f"flash_dq_{name}_d{d}")
    for src, name in _SOURCE.items()
    for d in HEAD_DIMS
}
_DKV = {
    (src, d): kernel("flash", f"flash_dkv_{name}_d{d}")
    for src, name in _SOURCE.items()
    for d in HEAD_DIMS
}


def tensor_cores(arch: str) -> bool:
    """Whether ``sm_XY`` has bfloat16 ``mma.sync`` (compute capability 8.0 or later)."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    return bool(digits) and int(digits) >= 80


class FlashOps:
    kernels: Launcher
    device: _native.Device

    def _flash_route(self, b, t, s, h, hkv, dh, causal, window) -> bool:
        """The FlashAttention-2 kernels take this attention (in bfloat16 compute)."""
        return (
            os.environ.get("RIFTCO_CUDA_FLASH", "1") != "0"
            and tensor_cores(self.device.arch)
            and hkv > 0
            and h % hkv == 0
            and dh in HEAD_DIMS
            and (not causal or s >= t)
            and b * t * s * h > 0
        )

    def _flash_launch(self, k, rows: int, bh: int, args: list) -> None:
        """One block per tile of 64 ``rows`` and (batch row, head), 4 warps each."""
        tiles = -(-rows // TILE)
        grid = (min(tiles, _MAX_GRID), min(bh, _MAX_GRID), 1)
        self.device.launch(k.module, k.name, grid, (THREADS, 1, 1), 0, args)

    @staticmethod
    def _flash_layout(src, stacked, h, hkv, dh):
        """(q, k, v offsets, q row, k and v row) of the kernels' reads: a stacked
        projection's columns ``(row, offsets)``, or ``[B, T, H, Dh]`` and ``[B, S, Hkv,
        Dh]`` tensors."""
        if stacked is None:
            return (0, 0, 0), h * dh, hkv * dh
        if src != "float32":
            raise CudaError(f"flash attention reads a stacked projection as float32, found {src}")
        row, offsets = stacked
        return tuple(offsets), row, row

    def _flash_forward(self, q, k, v, src, dims, scale, causal, window=0, stacked=None):
        """out ``[B, T, H, Dh]`` float32 and the statistics ``[B, H, T]``, one launch;
        ``dims`` ``(b, t, s, h, hkv, dh)``."""
        b, t, s, h, hkv, dh = dims
        offsets, q_row, kv_row = self._flash_layout(src, stacked, h, hkv, dh)
        out = self.kernels.alloc((b, t, h, dh), "float32")
        row_max = self.kernels.alloc((b, h, t), "float32")
        row_sum = self.kernels.alloc((b, h, t), "float32")
        self._flash_launch(
            _FORWARD[(src, dh)],
            t,
            b * h,
            [q, k, v, out, row_max, row_sum, b, t, s, h, hkv, int(window), *offsets, q_row, kv_row]
            + [float(scale), int(causal)],
        )
        return out, None, row_max, row_sum

    def _flash_backward(self, tensors, src, dims, scale, causal, window=0, stacked=None, into=None):
        """``tensors``: dout, out, q, k, v, row max and row sum. Two launches: dq (and
        delta = rowsum(dout * out)), then dk and dv. ``into`` ``(buffer, row, offsets)``:
        the three gradients go into one stacked matrix's columns (each returned as it)."""
        dout, out, q, k, v, row_max, row_sum = tensors
        b, t, s, h, hkv, dh = dims
        offsets, q_row, kv_row = self._flash_layout(src, stacked, h, hkv, dh)
        if into is None:
            dq = self.kernels.alloc((b, t, h, dh), "float32")
            dk = self.kernels.alloc((b, s, hkv, dh), "float32")
            dv = self.kernels.alloc((b, s, hkv, dh), "float32")
            grads, (dq_off, dk_off, dv_off) = (dq, dk, dv), (0, 0, 0)
            dq_row, dkv_row = h * dh, hkv * dh
        else:
            buffer, row, (dq_off, dk_off, dv_off) = into
            grads, dq_row, dkv_row = (buffer, buffer, buffer), row, row
        delta = self.kernels.alloc((b, h, t), "float32")
        common = [b, t, s, h, hkv, int(window), *offsets, q_row, kv_row]
        self._flash_launch(
            _DQ[(src, dh)],
            t,
            b * h,
            [dout, out, q, k, v, row_max, row_sum, delta, grads[0], *common, dq_off, dq_row]
            + [float(scale), int(causal)],
        )
        self._flash_launch(
            _DKV[(src, dh)],
            s,
            b * hkv,
            [dout, q, k, v, row_max, row_sum, delta, grads[1], grads[2], *common]
            + [dk_off, dv_off, dkv_row, float(scale), int(causal)],
        )
        return grads


__all__ = ["HEAD_DIMS", "FlashOps", "tensor_cores"]
