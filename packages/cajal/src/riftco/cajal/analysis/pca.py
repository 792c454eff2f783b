"""Deterministic covariance PCA: fit, transform, reconstruct.

The mean and covariance are computed in float64 without BLAS (``einsum`` with
``optimize=False`` sums in a fixed order whatever the thread count); the symmetric
eigenproblem is LAPACK's ``eigh``; components are sorted by decreasing variance (ties
by index) and each one's sign is fixed so that its largest-magnitude coordinate is
positive. The same rows therefore give the same bits, run to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.cajal.errors import ShapeError


@dataclass(frozen=True)
class PCA:
    """A fitted PCA: ``mean [d]``, ``components [k, d]`` (orthonormal rows),
    ``explained_variance [k]`` and ``explained_variance_ratio [k]``."""

    mean: np.ndarray = field(repr=False)
    components: np.ndarray = field(repr=False)
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray
    rows: int

    @classmethod
    def fit(cls, rows: Any, components: int | None = None) -> PCA:
        x = _matrix(rows)
        n, d = x.shape
        if n < 2:
            raise ShapeError(f"PCA.fit: expected at least 2 rows, found {n}")
        k = d if components is None else components
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d:
            raise ShapeError(f"PCA.fit: components must be an int in 1..{d}, found {components!r}")
        mean = np.einsum("nd->d", x, optimize=False) / n
        centered = x - mean
        covariance = np.einsum("ni,nj->ij", centered, centered, optimize=False) / (n - 1)
        covariance = (covariance + covariance.T) / 2
        values, vectors = np.linalg.eigh(covariance)
        order = sorted(range(d), key=lambda i: (-values[i], i))[:k]
        chosen = vectors[:, order].T.copy()
        for row in chosen:
            if row[np.argmax(np.abs(row))] < 0:
                row *= -1
        variance = np.maximum(values[order], 0.0)
        total = float(np.maximum(values, 0.0).sum())
        ratio = variance / total if total > 0 else np.zeros_like(variance)
        for array in (mean, chosen, variance, ratio):
            array.setflags(write=False)
        return cls(mean, chosen, variance, ratio, n)

    @property
    def n_components(self) -> int:
        return self.components.shape[0]

    def transform(self, rows: Any) -> np.ndarray:
        """Coordinates ``[N, k]`` of ``rows`` on the components."""
        x = _matrix(rows, self.mean.shape[0])
        return np.einsum("nd,kd->nk", x - self.mean, self.components, optimize=False)

    def reconstruct(self, coordinates: Any) -> np.ndarray:
        """Rows ``[N, d]`` back from coordinates ``[N, k]``."""
        z = np.asarray(coordinates, dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != self.n_components:
            raise ShapeError(
                f"reconstruct: expected coordinates [N, {self.n_components}], found {list(z.shape)}"
            )
        return np.einsum("nk,kd->nd", z, self.components, optimize=False) + self.mean

    def ablate(self, rows: Any, components: list[int]) -> np.ndarray:
        """``rows`` with their coordinates on ``components`` set to zero (the mean)."""
        z = self.transform(rows)
        for c in components:
            if not 0 <= c < self.n_components:
                raise ShapeError(f"ablate: component {c} is outside 0..{self.n_components - 1}")
            z[:, c] = 0.0
        return self.reconstruct(z)


def _matrix(rows: Any, width: int | None = None) -> np.ndarray:
    x = np.asarray(getattr(rows, "rows", rows), dtype=np.float64)
    if x.ndim != 2:
        raise ShapeError(f"PCA: expected rows [N, d], found shape {list(x.shape)}")
    if width is not None and x.shape[1] != width:
        raise ShapeError(f"PCA: expected rows of width {width}, found {x.shape[1]}")
    if not np.isfinite(x).all():
        raise ShapeError("PCA: expected finite rows")
    return x
