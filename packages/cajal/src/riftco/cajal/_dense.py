"""Dense row-major tensors as flat lists of floats plus a shape, with contraction written out.

Private helpers of multilinear.py; nothing here knows about types or programs.
"""

from __future__ import annotations

from collections.abc import Sequence


def size(shape: Sequence[int]) -> int:
    total = 1
    for extent in shape:
        total *= extent
    return total


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides: the last axis is contiguous."""
    result = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        result[axis] = result[axis + 1] * shape[axis + 1]
    return result


def transpose(
    data: Sequence[float], shape: Sequence[int], axes: Sequence[int]
) -> tuple[list[float], tuple[int, ...]]:
    """The tensor whose axis ``i`` is axis ``axes[i]`` of the input."""
    old_strides = strides(shape)
    offsets = [0]
    for axis in axes:
        stride = old_strides[axis]
        offsets = [offset + i * stride for offset in offsets for i in range(shape[axis])]
    return [data[offset] for offset in offsets], tuple(shape[axis] for axis in axes)


def move_axis(
    data: Sequence[float], shape: Sequence[int], source: int, destination: int
) -> tuple[list[float], tuple[int, ...]]:
    axes = [axis for axis in range(len(shape)) if axis != source]
    axes.insert(destination, source)
    return transpose(data, shape, axes)


def matmul(
    left: Sequence[float], right: Sequence[float], rows: int, inner: int, columns: int
) -> list[float]:
    """``[rows, inner] @ [inner, columns]``, skipping zero coefficients of ``left``."""
    out = [0.0] * (rows * columns)
    for i in range(rows):
        base = i * columns
        accumulator = out[base : base + columns]
        for k in range(inner):
            coefficient = left[i * inner + k]
            if coefficient:
                row = right[k * columns : (k + 1) * columns]
                accumulator = [a + coefficient * b for a, b in zip(accumulator, row)]
        out[base : base + columns] = accumulator
    return out


def tensordot(
    left: Sequence[float],
    left_shape: Sequence[int],
    left_axis: int,
    right: Sequence[float],
    right_shape: Sequence[int],
    right_axis: int,
) -> tuple[list[float], tuple[int, ...]]:
    """Contract one axis of ``left`` with one axis of ``right``; the result's axes are the
    other axes of ``left`` then the other axes of ``right``, each in order."""
    inner = left_shape[left_axis]
    if right_shape[right_axis] != inner:
        raise ValueError(f"tensordot: axis extents {inner} and {right_shape[right_axis]} differ")
    left_data, left_moved = move_axis(left, left_shape, left_axis, len(left_shape) - 1)
    right_data, right_moved = move_axis(right, right_shape, right_axis, 0)
    rows, columns = size(left_moved[:-1]), size(right_moved[1:])
    data = matmul(left_data, right_data, rows, inner, columns)
    return data, tuple(left_moved[:-1]) + tuple(right_moved[1:])


def outer(left: Sequence[float], right: Sequence[float]) -> list[float]:
    """The flat outer product: ``left``'s axes, then ``right``'s."""
    return [a * b for a in left for b in right]
