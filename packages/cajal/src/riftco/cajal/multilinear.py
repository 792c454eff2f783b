"""A dense, backend-neutral multilinear map of any arity.

A map of arity k is a tensor T of shape ``[d_out, d_1, ..., d_k]`` (output-major), stored
flat in row-major order, and

    f(x_1, ..., x_k)[o] = sum over i_1..i_k of T[o, i_1, ..., i_k] * x_1[i_1] * ... * x_k[i_k]

It is linear in each argument separately. The representation is plain floats, so any
backend can load it: ``shape`` and ``data`` are all a lowering needs.
"""

from __future__ import annotations

import hashlib
import math
import operator
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from riftco.cajal import _dense
from riftco.cajal.errors import ShapeError


@dataclass(frozen=True)
class MultilinearMap:
    """The tensor ``data`` (flat, row-major) of shape ``[d_out, d_1, ..., d_k]``."""

    shape: tuple[int, ...]
    data: tuple[float, ...]

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not shape or any(not isinstance(n, int) or n < 1 for n in shape):
            raise ShapeError(
                f"multilinear map: expected a shape [d_out, d_1, ..., d_k] of positive "
                f"integers, found {list(shape)}"
            )
        data = tuple(float(x) for x in self.data)
        if len(data) != _dense.size(shape):
            raise ShapeError(
                f"multilinear map of shape {list(shape)}: expected {_dense.size(shape)} "
                f"entries, found {len(data)}"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "data", data)

    # -- construction ---------------------------------------------------------

    @classmethod
    def zeros(cls, output_dimension: int, input_dimensions: Sequence[int] = ()) -> MultilinearMap:
        shape = (output_dimension, *input_dimensions)
        return cls(shape, (0.0,) * _dense.size(shape))

    @classmethod
    def constant(cls, vector: Sequence[float]) -> MultilinearMap:
        """The map of arity 0 whose value is ``vector``."""
        return cls((len(vector),), tuple(vector))

    @classmethod
    def identity(cls, dimension: int) -> MultilinearMap:
        """The linear map x -> x on vectors of length ``dimension``."""
        data = [0.0] * (dimension * dimension)
        for i in range(dimension):
            data[i * dimension + i] = 1.0
        return cls((dimension, dimension), tuple(data))

    # -- shape ----------------------------------------------------------------

    @property
    def output_dimension(self) -> int:
        return self.shape[0]

    @property
    def input_dimensions(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def arity(self) -> int:
        return len(self.shape) - 1

    def entry(self, *index: int) -> float:
        """``T[o, i_1, ..., i_k]``."""
        if len(index) != len(self.shape) or any(not 0 <= i < n for i, n in zip(index, self.shape)):
            raise ShapeError(f"entry: expected an index within {list(self.shape)}, found {index}")
        return self.data[sum(i * s for i, s in zip(index, _dense.strides(self.shape)))]

    def nonzero_entries(self) -> Iterator[tuple[tuple[int, ...], float]]:
        """Every (index, value) with a nonzero value, in row-major order."""
        strides = _dense.strides(self.shape)
        for offset, value in enumerate(self.data):
            if value:
                yield tuple((offset // s) % n for s, n in zip(strides, self.shape)), value

    # -- evaluation -----------------------------------------------------------

    def __call__(self, *arguments: Sequence[float]) -> tuple[float, ...]:
        """Contract each argument with its axis, the last argument first."""
        if len(arguments) != self.arity:
            raise ShapeError(
                f"multilinear map of shape {list(self.shape)}: expected {self.arity} "
                f"arguments, found {len(arguments)}"
            )
        data: Sequence[float] = self.data
        for position in range(self.arity - 1, -1, -1):
            argument = tuple(float(x) for x in arguments[position])
            width = self.input_dimensions[position]
            if len(argument) != width:
                raise ShapeError(
                    f"argument {position + 1}: expected a vector of length {width}, "
                    f"found length {len(argument)}"
                )
            data = [
                sum(map(operator.mul, data[start : start + width], argument))
                for start in range(0, len(data), width)
            ]
        return tuple(data)

    def digest(self) -> str:
        """The map's identity: SHA-256 over its shape and its entries as little-endian
        float64, so two maps share a digest exactly when they are equal."""
        h = hashlib.sha256()
        h.update(struct.pack(f"<{len(self.shape) + 1}q", len(self.shape), *self.shape))
        h.update(struct.pack(f"<{len(self.data)}d", *self.data))
        return h.hexdigest()

    def allclose(self, other: MultilinearMap, tolerance: float = 1e-9) -> bool:
        return self.shape == other.shape and all(
            math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)
            for a, b in zip(self.data, other.data)
        )

    # -- algebra --------------------------------------------------------------

    def _require_same_inputs(self, other: MultilinearMap, operation: str) -> None:
        if self.input_dimensions != other.input_dimensions:
            raise ShapeError(
                f"{operation}: expected maps with the same argument dimensions, found "
                f"{list(self.input_dimensions)} and {list(other.input_dimensions)}"
            )

    def __add__(self, other: MultilinearMap) -> MultilinearMap:
        if self.shape != other.shape:
            raise ShapeError(
                f"add: expected equal shapes, found {list(self.shape)} and {list(other.shape)}"
            )
        return MultilinearMap(self.shape, tuple(map(operator.add, self.data, other.data)))

    def scale(self, factor: float) -> MultilinearMap:
        return MultilinearMap(self.shape, tuple(factor * x for x in self.data))

    def permute(self, order: Sequence[int]) -> MultilinearMap:
        """The map whose argument ``i`` is argument ``order[i]`` of this one."""
        if sorted(order) != list(range(self.arity)):
            raise ShapeError(
                f"permute: expected a permutation of 0..{self.arity - 1}, found {list(order)}"
            )
        data, shape = _dense.transpose(self.data, self.shape, [0, *(1 + i for i in order)])
        return MultilinearMap(shape, tuple(data))

    def substitute(self, position: int, inner: MultilinearMap) -> MultilinearMap:
        """Feed ``inner``'s output into argument ``position``; ``inner``'s arguments take
        that argument's place, in order."""
        if not 0 <= position < self.arity:
            raise ShapeError(f"substitute: expected an argument position below {self.arity}")
        if self.input_dimensions[position] != inner.output_dimension:
            raise ShapeError(
                f"substitute at argument {position + 1}: expected an inner map with output "
                f"dimension {self.input_dimensions[position]}, found {inner.output_dimension}"
            )
        data, shape = _dense.tensordot(
            self.data, self.shape, position + 1, inner.data, inner.shape, 0
        )
        # axes now: output, arguments before, arguments after, inner arguments
        before = list(range(1, position + 1))
        after = list(range(position + 1, self.arity))
        inserted = list(range(self.arity, self.arity + inner.arity))
        data, shape = _dense.transpose(data, shape, [0, *before, *inserted, *after])
        return MultilinearMap(shape, tuple(data))

    def outer(self, other: MultilinearMap) -> MultilinearMap:
        """``(x, y) -> flatten(outer(self(x), other(y)))``: output index ``i * d + j``; this
        map's arguments, then ``other``'s."""
        data = _dense.outer(self.data, other.data)
        shape = self.shape + other.shape
        axes = [0, self.arity + 1, *range(1, self.arity + 1), *range(self.arity + 2, len(shape))]
        data, shape = _dense.transpose(data, shape, axes)
        merged = (shape[0] * shape[1], *shape[2:])
        return MultilinearMap(merged, tuple(data))

    def concatenate(self, other: MultilinearMap) -> MultilinearMap:
        """Stack the outputs: ``x -> self(x) ++ other(x)``."""
        self._require_same_inputs(other, "concatenate")
        shape = (self.output_dimension + other.output_dimension, *self.input_dimensions)
        return MultilinearMap(shape, self.data + other.data)

    def pad_output(self, before: int, after: int) -> MultilinearMap:
        """``x -> zeros(before) ++ self(x) ++ zeros(after)``."""
        block = _dense.size(self.input_dimensions)
        data = (0.0,) * (before * block) + self.data + (0.0,) * (after * block)
        return MultilinearMap(
            (before + self.output_dimension + after, *self.input_dimensions), data
        )

    def slice_output(self, start: int, stop: int) -> MultilinearMap:
        """``x -> self(x)[start:stop]``."""
        if not 0 <= start < stop <= self.output_dimension:
            raise ShapeError(
                f"slice_output: expected 0 <= start < stop <= {self.output_dimension}, "
                f"found {start}:{stop}"
            )
        block = _dense.size(self.input_dimensions)
        data = self.data[start * block : stop * block]
        return MultilinearMap((stop - start, *self.input_dimensions), data)

    def to_nested(self) -> list:
        """The tensor as nested lists, output axis outermost."""
        nested: list = list(self.data)
        for extent in reversed(self.shape[1:]):
            nested = [nested[i : i + extent] for i in range(0, len(nested), extent)]
        return nested
