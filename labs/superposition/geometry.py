"""The geometry behind feature superposition, in numpy.

Random unit vectors in d dimensions are nearly orthogonal: the angle between two of
them has density proportional to ``sin(theta) ** (d - 2)`` on [0, 180] degrees, centred
on 90 with a spread of about ``57.3 / sqrt(d)`` degrees. So a d-dimensional space holds
many more than d directions that are all within a band of tolerance around 90 degrees
of each other, and a model can store more features than it has dimensions, as long as
only a few are active at once: reading feature j out of a sum of active features by a
dot product gives 1 plus a little interference when j is active, and only the
interference when it is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DIMENSIONS = (3, 8, 16, 32, 64, 128, 768, 4096)


def unit_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    """``count`` directions uniform on the unit sphere of ``dimension`` dimensions
    (normalized Gaussian samples from PCG64 seeded with ``seed``), float64 ``[count, dim]``."""
    if count < 1 or dimension < 2:
        raise ValueError(f"expected count >= 1 and dimension >= 2; found {count}, {dimension}")
    rng = np.random.Generator(np.random.PCG64(seed))
    vectors = rng.standard_normal((count, dimension))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def angles_from(cosines: np.ndarray) -> np.ndarray:
    """Angles in degrees of the given cosines (clipped into [-1, 1] against rounding)."""
    return np.degrees(np.arccos(np.clip(cosines, -1.0, 1.0)))


def pairwise_angles(vectors: np.ndarray) -> np.ndarray:
    """The angle of every pair i < j, in degrees (``n (n - 1) / 2`` values, row-major)."""
    gram = vectors @ vectors.T
    upper = np.triu_indices(len(vectors), k=1)
    return angles_from(gram[upper])


def query_angles(vectors: np.ndarray, index: int) -> np.ndarray:
    """The angles from vector ``index`` to every other one, in degrees."""
    if not 0 <= index < len(vectors):
        raise ValueError(f"query index must lie in [0, {len(vectors)}); found {index}")
    cosines = np.delete(vectors @ vectors[index], index)
    return angles_from(cosines)


def band(theta: float) -> tuple[float, float]:
    """The band of tolerance ``[theta, 180 - theta]`` degrees around 90 (0 < theta <= 90)."""
    if not 0.0 < theta <= 90.0:
        raise ValueError(f"theta must lie in (0, 90] degrees; found {theta}")
    return theta, 180.0 - theta


def angle_density(degrees: np.ndarray, dimension: int) -> np.ndarray:
    """The density (per degree) of the angle between two random unit vectors."""
    radians = np.radians(degrees)
    log_norm = (
        math.lgamma(dimension / 2) - math.lgamma((dimension - 1) / 2) - 0.5 * math.log(math.pi)
    )
    with np.errstate(divide="ignore"):
        log_sin = np.log(np.sin(radians))
    return np.exp(log_norm + (dimension - 2) * log_sin) * (math.pi / 180.0)


def expected_band_fraction(theta: float, dimension: int, points: int = 20001) -> float:
    """The probability that the angle between two random unit vectors lies in the band
    (the density integrated by the trapezoid rule)."""
    low, high = band(theta)
    grid = np.linspace(low, high, points)
    return float(np.clip(np.trapezoid(angle_density(grid, dimension), grid), 0.0, 1.0))


def expected_angle_sd(dimension: int) -> float:
    """The angle's standard deviation, ``sqrt(E[(theta - 90)^2])``, in degrees (numeric)."""
    grid = np.linspace(0.0, 180.0, 36001)
    density = angle_density(grid, dimension)
    return float(np.sqrt(np.trapezoid(density * (grid - 90.0) ** 2, grid)))


@dataclass(frozen=True)
class AngleStats:
    dimension: int
    count: int
    mean: float
    sd: float
    minimum: float
    maximum: float
    in_band: float
    expected_in_band: float
    expected_sd: float

    def to_dict(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def angle_stats(angles: np.ndarray, dimension: int, theta: float) -> AngleStats:
    low, high = band(theta)
    return AngleStats(
        dimension=dimension,
        count=int(angles.size),
        mean=float(angles.mean()),
        sd=float(angles.std()),
        minimum=float(angles.min()),
        maximum=float(angles.max()),
        in_band=float(((angles >= low) & (angles <= high)).mean()),
        expected_in_band=expected_band_fraction(theta, dimension),
        expected_sd=expected_angle_sd(dimension),
    )


@dataclass(frozen=True)
class Readout:
    """Features stored in superposition and read back by dot products."""

    dimension: int
    features: int
    active: tuple[int, ...]
    values: np.ndarray  # each feature's readout, x . f_j
    decoded: tuple[int, ...]  # features whose readout exceeds the tolerance
    tolerance: float
    max_interference: float  # the largest |cos| between two features

    @property
    def recovered(self) -> bool:
        return set(self.decoded) == set(self.active)

    @property
    def false_positives(self) -> int:
        return len(set(self.decoded) - set(self.active))

    @property
    def missed(self) -> int:
        return len(set(self.active) - set(self.decoded))

    def to_dict(self) -> dict[str, object]:
        return {
            "dimension": self.dimension,
            "features": self.features,
            "active": list(self.active),
            "decoded": list(self.decoded),
            "tolerance": self.tolerance,
            "recovered": self.recovered,
            "false_positives": self.false_positives,
            "missed": self.missed,
            "max_interference": self.max_interference,
            "active_readouts": [float(self.values[i]) for i in self.active],
            "largest_inactive_readout": float(
                np.delete(self.values, list(self.active)).max(initial=-np.inf)
            ),
        }


def superpose(dimension: int, features: int, active: int, tolerance: float, seed: int) -> Readout:
    """Store ``active`` of ``features`` random directions (value 1 each) in one vector
    of ``dimension`` dimensions, and read every feature back; a feature is decoded when
    its readout exceeds ``tolerance``."""
    if not 1 <= active <= features:
        raise ValueError(f"expected 1 <= active <= features; found {active} of {features}")
    directions = unit_vectors(features, dimension, seed)
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    chosen = tuple(sorted(int(i) for i in rng.choice(features, size=active, replace=False)))
    x = directions[list(chosen)].sum(axis=0)
    values = directions @ x
    gram = np.abs(directions @ directions.T)
    np.fill_diagonal(gram, 0.0)
    decoded = tuple(int(i) for i in np.flatnonzero(values > tolerance))
    return Readout(
        dimension, features, chosen, values, decoded, tolerance, float(gram.max(initial=0.0))
    )


def recovery_curve(
    dimension: int, features: int, tolerance: float, seed: int, max_active: int, trials: int
) -> list[dict[str, float]]:
    """For 1..``max_active`` active features: the share of ``trials`` random draws
    (fresh directions and active sets each) decoded exactly, and the mean false
    positives and misses."""
    out = []
    for active in range(1, min(max_active, features) + 1):
        results = [
            superpose(dimension, features, active, tolerance, seed + 1000 * active + 2 * t)
            for t in range(trials)
        ]
        out.append(
            {
                "active": active,
                "recovered": sum(r.recovered for r in results) / trials,
                "false_positives": float(np.mean([r.false_positives for r in results])),
                "missed": float(np.mean([r.missed for r in results])),
            }
        )
    return out


__all__ = [
    "DIMENSIONS",
    "AngleStats",
    "Readout",
    "angle_density",
    "angle_stats",
    "angles_from",
    "band",
    "expected_angle_sd",
    "expected_band_fraction",
    "pairwise_angles",
    "query_angles",
    "recovery_curve",
    "superpose",
    "unit_vectors",
]
