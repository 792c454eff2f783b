"""Adam's moments of one parameter: one contiguous page, or pages of a bounded size."""

from __future__ import annotations

import numpy as np

import riftco.tensor as rt
from riftco.tensor import Backend, Tensor


def page_lengths(size: int, page_size: int | None) -> list[int]:
    """Element counts of the pages of a ``size``-element moment (None: one page)."""
    if page_size is None or size <= page_size:
        return [size]
    full, rest = divmod(size, page_size)
    return [page_size] * full + ([rest] if rest else [])


class Moments:
    """First (``m``) and second (``v``) moments as lists of 1-D float32 tensors.

    Pages hold ``page_size`` elements except the last; together they cover the
    parameter's elements in row-major order. The layout never changes results.
    """

    __slots__ = ("m", "shape", "v")

    def __init__(self, shape: tuple[int, ...], m: list[Tensor], v: list[Tensor]):
        self.shape, self.m, self.v = shape, m, v

    @classmethod
    def zeros(cls, shape: tuple[int, ...], backend: Backend, page_size: int | None) -> Moments:
        lengths = page_lengths(_count(shape), page_size)
        m = [rt.zeros(n, backend=backend) for n in lengths]
        v = [rt.zeros(n, backend=backend) for n in lengths]
        return cls(shape, m, v)

    @classmethod
    def from_arrays(
        cls, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, backend: Backend, page_size: int | None
    ) -> Moments:
        """Moments holding copies of two host arrays of the parameter's shape."""
        shape = tuple(exp_avg.shape)
        bounds = np.cumsum(page_lengths(exp_avg.size, page_size))[:-1]
        m = [rt.from_numpy(p, backend=backend) for p in np.split(exp_avg.reshape(-1), bounds)]
        v = [rt.from_numpy(p, backend=backend) for p in np.split(exp_avg_sq.reshape(-1), bounds)]
        return cls(shape, m, v)

    @property
    def backend(self) -> Backend:
        return self.m[0].backend

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Host copies of both moments, shaped like the parameter."""
        return _join(self.m, self.shape), _join(self.v, self.shape)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _join(pages: list[Tensor], shape: tuple[int, ...]) -> np.ndarray:
    return np.concatenate([p.numpy() for p in pages]).reshape(shape)


__all__ = ["Moments", "page_lengths"]
