"""Element strides of row-major storage: what the op layer and every device backend
derive to read a contiguous operand as a view (permuted, sliced, broadcast).

Strides count elements, not bytes; a broadcast axis has stride 0.
"""

from __future__ import annotations

from collections.abc import Sequence


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """The strides of a C-contiguous ``shape`` (the last axis 1)."""
    strides = [0] * len(shape)
    step = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = step
        step *= int(shape[d])
    return strides


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Strides reading a contiguous ``shape`` broadcast to ``out_shape`` (numpy's rules:
    ``shape`` is aligned on the right; its size-1 axes, and the axes it lacks, read
    stride 0 where ``out_shape`` is larger)."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + [int(n) for n in shape]
    strides = [0] * pad + contiguous_strides(shape)
    return [0 if n == 1 and o != 1 else s for n, o, s in zip(full, out_shape, strides)]


def coalesce(shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent axes that every operand walks contiguously, and drop size-1 axes,
    so that a view reads the same elements through fewer axes (a kernel with a fixed
    number of axes fits more views). Returns ``(shape, [strides of each operand])``."""
    keep = [d for d, n in enumerate(shape) if n != 1]
    out_shape = [int(shape[d]) for d in keep]
    out_strides = [[int(s[d]) for d in keep] for s in strides]
    d = len(out_shape) - 2
    while d >= 0:
        inner = out_shape[d + 1]
        if all(s[d] == s[d + 1] * inner for s in out_strides):
            out_shape[d] *= inner
            del out_shape[d + 1]
            for s in out_strides:
                s[d] = s[d + 1]
                del s[d + 1]
        d -= 1
    return out_shape, out_strides


__all__ = ["broadcast_strides", "coalesce", "contiguous_strides"]
