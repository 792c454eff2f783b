"""The global gradient norm, computed without overflow, and the clip scale.

Each gradient's sum of squares comes from the backend's ``sum_squares``
reduction, which accumulates in float64 but returns float32. When that float32
result overflows (or underflows), the gradient is rescaled by its largest
magnitude first, so the norm is finite whenever every gradient element is.
The per-gradient sums are combined in float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import riftco.tensor as rt
from riftco.tensor import Tensor

#: The smallest normal float32; a float32 sum of squares below it may have lost digits.
_TINY = 1.1754943508222875e-38


def sum_of_squares(grad: Tensor) -> float:
    """The sum of the squares of ``grad``'s elements, as a float64 that does not overflow."""
    if grad.size == 0:
        return 0.0
    total = float(rt.sum_squares(grad))
    if _TINY <= total < math.inf:
        return total
    # Overflow, underflow, all zeros or a non-finite element: scale by the largest magnitude.
    largest = float(rt.max(rt.abs(grad)))
    if largest == 0.0 or not math.isfinite(largest):
        return largest * largest
    return largest * largest * float(rt.sum_squares(grad / largest))


def global_grad_norm(grads: Iterable[Tensor]) -> float:
    """The L2 norm of all gradients taken together (inf or nan if any element is)."""
    return math.sqrt(math.fsum(sum_of_squares(g) for g in grads))


def clip_scale(norm: float, max_norm: float | None) -> float:
    """``max_norm / norm`` when ``norm`` exceeds ``max_norm``, else 1 (also when it is None)."""
    if max_norm is None or not norm > max_norm:
        return 1.0
    return max_norm / norm


__all__ = ["clip_scale", "global_grad_norm", "sum_of_squares"]
