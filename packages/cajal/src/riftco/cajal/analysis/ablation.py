"""Paired ablation statistics: the per-example effect of an ablation, its mean, and a
confidence interval by bootstrap or by exact permutation (sign flips)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.cajal.errors import ShapeError

METHODS = ("bootstrap", "permutation")
MAX_EXACT_EXAMPLES = 20
"""The exact permutation test enumerates 2^n sign flips; beyond this, use bootstrap."""


@dataclass(frozen=True)
class AblationStatistics:
    """``effects = ablated - baseline`` per example, their mean, a ``confidence``
    interval ``[low, high]`` for it, and a two-sided sign-flip p-value (exact for the
    permutation method; against a bootstrap-centred null for the bootstrap)."""

    method: str
    examples: int
    mean_difference: float
    low: float
    high: float
    confidence: float
    p_value: float
    effects: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "examples": self.examples,
            "mean_difference": self.mean_difference,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "p_value": self.p_value,
        }


def paired_ablation(
    baseline: Any,
    ablated: Any,
    *,
    method: str = "bootstrap",
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> AblationStatistics:
    """Statistics of ``ablated - baseline`` (one score per example, same examples)."""
    base = np.asarray(baseline, dtype=np.float64).reshape(-1)
    abl = np.asarray(ablated, dtype=np.float64).reshape(-1)
    if base.shape != abl.shape or base.size == 0:
        raise ShapeError(
            f"paired_ablation: expected two equal, non-empty score vectors, found "
            f"{base.size} and {abl.size}"
        )
    if not (np.isfinite(base).all() and np.isfinite(abl).all()):
        raise ShapeError("paired_ablation: expected finite scores")
    if not 0.0 < confidence < 1.0:
        raise ShapeError(f"confidence: expected a value in (0, 1), found {confidence!r}")
    if method not in METHODS:
        raise ShapeError(f"method: expected one of {list(METHODS)}, found {method!r}")
    effects = abl - base
    effects.setflags(write=False)
    mean = float(effects.mean())
    alpha = 1.0 - confidence
    if method == "bootstrap":
        if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 100:
            raise ShapeError(f"resamples: expected an int >= 100, found {resamples!r}")
        means = _bootstrap_means(effects, resamples, seed)
        low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
        centred = means - mean
        p = float((np.count_nonzero(np.abs(centred) >= abs(mean) - 1e-12) + 1) / (resamples + 1))
    else:
        if effects.size > MAX_EXACT_EXAMPLES:
            raise ShapeError(
                f"exact permutation: {effects.size} examples need 2^{effects.size} sign "
                f"flips; the limit is {MAX_EXACT_EXAMPLES} examples (use method='bootstrap')"
            )
        signs = _signs(effects.size)
        a, b = signs @ effects / effects.size, signs.sum(axis=1) / effects.size
        p = _flip_p(a, b, mean, 0.0)
        low, high = _invert(a, b, mean, alpha, float(effects.min()), float(effects.max()))
    return AblationStatistics(
        method, int(effects.size), mean, float(low), float(high), confidence, min(p, 1.0), effects
    )


def _bootstrap_means(effects: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(seed))
    n = effects.size
    means = np.empty(resamples)
    chunk = max(1, (1 << 22) // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = effects[picks].mean(axis=1)
    return means


def _signs(n: int) -> np.ndarray:
    codes = np.arange(1 << n, dtype=np.int64)[:, None]
    bits = (codes >> np.arange(n, dtype=np.int64)) & 1
    return (1 - 2 * bits).astype(np.float64)


def _flip_p(a: np.ndarray, b: np.ndarray, mean: float, mu: float) -> float:
    """Exact two-sided p of ``H0: the effects are symmetric around mu``."""
    observed = abs(mean - mu)
    return float(np.count_nonzero(np.abs(a - mu * b) >= observed - 1e-12) / a.size)


def _invert(
    a: np.ndarray, b: np.ndarray, mean: float, alpha: float, lowest: float, highest: float
) -> tuple[float, float]:
    """The interval of ``mu`` the exact test does not reject at ``alpha``, by bisection."""

    def bound(edge: float) -> float:
        if _flip_p(a, b, mean, edge) > alpha:
            return edge
        inside, outside = mean, edge
        for _ in range(60):
            middle = (inside + outside) / 2
            if _flip_p(a, b, mean, middle) > alpha:
                inside = middle
            else:
                outside = middle
        return inside

    return bound(lowest), bound(highest)
