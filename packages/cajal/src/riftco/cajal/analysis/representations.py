"""Named representation matrices and row-wise interventions on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.cajal.errors import ShapeError


@dataclass(frozen=True)
class RepresentationMatrix:
    """``rows [N, d]`` (float64) of the representation called ``name``; one row per
    example (or per example and position), optionally labelled."""

    name: str
    rows: np.ndarray = field(repr=False)
    labels: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        rows = np.array(self.rows, dtype=np.float64, copy=True)
        if rows.ndim != 2:
            raise ShapeError(f"{self.name}: expected rows [N, d], found shape {list(rows.shape)}")
        if not np.isfinite(rows).all():
            raise ShapeError(f"{self.name}: expected finite rows")
        if self.labels and len(self.labels) != len(rows):
            raise ShapeError(f"{self.name}: {len(rows)} rows but {len(self.labels)} labels")
        rows.setflags(write=False)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "labels", tuple(self.labels))

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape

    def select(self, mask: Sequence[bool] | np.ndarray) -> RepresentationMatrix:
        """The rows where ``mask`` is true (labels kept)."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (len(self.rows),):
            raise ShapeError(f"{self.name}: expected a mask of {len(self.rows)} rows")
        labels = tuple(lab for lab, keep in zip(self.labels, mask) if keep) if self.labels else ()
        return RepresentationMatrix(self.name, self.rows[mask], labels)


def representation_matrix(
    traces: Mapping[str, np.ndarray],
    name: str,
    positions: int | Sequence[int] | None = None,
    labels: Sequence[Any] = (),
) -> RepresentationMatrix:
    """The trace ``name`` as a matrix: a ``[B, d]`` trace as is; a ``[B, T, d]`` trace at
    one position (``[B, d]``), at several positions concatenated per example
    (``[B, len * d]``), or, with ``positions=None``, every position as its own row
    (``[B * T, d]``)."""
    if name not in traces:
        raise ShapeError(f"no trace named {name!r}; the traces are {sorted(traces)}")
    trace = np.asarray(traces[name])
    if trace.ndim == 2:
        if positions is not None:
            raise ShapeError(f"{name}: a [B, d] trace has no positions")
        return RepresentationMatrix(name, trace, tuple(labels))
    if trace.ndim != 3:
        raise ShapeError(f"{name}: expected a [B, d] or [B, T, d] trace, found {list(trace.shape)}")
    batch, steps, width = trace.shape
    if positions is None:
        return RepresentationMatrix(name, trace.reshape(batch * steps, width), tuple(labels))
    chosen = [positions] if isinstance(positions, int) else list(positions)
    for p in chosen:
        if not 0 <= p < steps:
            raise ShapeError(f"{name}: position {p} is outside 0..{steps - 1}")
    return RepresentationMatrix(name, trace[:, chosen, :].reshape(batch, -1), tuple(labels))


def _rows_mask(n: int, rows: Sequence[int] | np.ndarray | None) -> np.ndarray:
    if rows is None:
        return np.ones(n, dtype=bool)
    rows = np.asarray(rows)
    if rows.dtype == bool:
        if rows.shape != (n,):
            raise ShapeError(f"rows: expected a mask of {n}, found shape {list(rows.shape)}")
        return rows
    mask = np.zeros(n, dtype=bool)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ShapeError(f"rows: expected indices in 0..{n - 1}")
    mask[rows.astype(np.int64)] = True
    return mask


def replace_rows(
    matrix: np.ndarray, rows: Sequence[int] | np.ndarray | None, values: Any
) -> np.ndarray:
    """A copy of ``matrix`` whose selected rows are ``values`` (one row, broadcast, or
    one row per selected row)."""
    out = np.array(matrix, dtype=np.float64, copy=True)
    mask = _rows_mask(len(out), rows)
    out[mask] = np.asarray(values, dtype=np.float64)
    return out


def steer_rows(
    matrix: np.ndarray,
    direction: Any,
    scale: float,
    rows: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """A copy of ``matrix`` with ``scale * direction`` added to the selected rows."""
    out = np.array(matrix, dtype=np.float64, copy=True)
    direction = np.asarray(direction, dtype=np.float64)
    if direction.shape != (out.shape[1],):
        raise ShapeError(
            f"direction: expected shape [{out.shape[1]}], found {list(direction.shape)}"
        )
    out[_rows_mask(len(out), rows)] += scale * direction
    return out


def project_out_rows(
    matrix: np.ndarray, directions: Any, rows: Sequence[int] | np.ndarray | None = None
) -> np.ndarray:
    """A copy of ``matrix`` with the span of ``directions`` (``[k, d]``, orthonormalized
    here) removed from the selected rows."""
    out = np.array(matrix, dtype=np.float64, copy=True)
    basis = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    if basis.shape[1] != out.shape[1]:
        raise ShapeError(f"directions: expected [k, {out.shape[1]}], found {list(basis.shape)}")
    q, _ = np.linalg.qr(basis.T)
    mask = _rows_mask(len(out), rows)
    out[mask] -= (out[mask] @ q) @ q.T
    return out
