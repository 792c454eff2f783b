"""The global gradient norm, computed without overflow, and the clip scale.

Each gradient's sum of squares comes from the backend's ``sum_squares``
reduction, which accumulates in float64 but returns float32. When that float32
result overflows (or underflows), the gradient is rescaled by its largest
magnitude first, so the norm is finite whenever every gradient element is.
The per-gradient sums are combined in float64.

All the per-gradient sums (and any other scalars a training step reports, such as
its loss) come to the host in one read: on an accelerator each read is a device
round trip, so a step makes one, not one per gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


def norm_and_values(
    grads: Iterable[Tensor], values: Sequence[Tensor] = ()
) -> tuple[float, list[float]]:
    """The global gradient norm and the host values of the one-element tensors
    ``values``, read from the device together.

    Each gradient's float32 sum of squares is computed on its backend; they and
    ``values`` are gathered into one vector and read once. Only a sum that
    overflowed or underflowed is recomputed (rescaled, reading again), which a
    training step meets only when something is already wrong.
    """
    grads = list(grads)
    for v in values:
        if v.size != 1:
            raise rt.ShapeError(f"norm_and_values: values must have one element, found {v.shape}")
    parts = [rt.sum_squares(g).reshape(1) for g in grads if g.size] + [
        rt.astype(v, rt.float32).reshape(1) for v in values
    ]
    if not parts:
        return 0.0, []
    backend = parts[0].backend
    host = rt.concatenate([p.to(backend) for p in parts], 0).numpy().tolist()
    sums, read = host[: len(parts) - len(values)], host[len(parts) - len(values) :]
    totals = iter(sums)
    return norm_from_sums(
        [g for g in grads if g.size], [next(totals) for g in grads if g.size]
    ), read


def norm_from_sums(grads: Sequence[Tensor], sums: Sequence[float]) -> float:
    """The global norm from each gradient's float32 sum of squares as the backend gave
    it: a sum that overflowed or underflowed is recomputed rescaled (a read each)."""
    squares = [
        total if _TINY <= total < math.inf else sum_of_squares(g)
        for g, total in zip(grads, sums, strict=True)
    ]
    return math.sqrt(math.fsum(squares))


def global_grad_norm(grads: Iterable[Tensor]) -> float:
    """The L2 norm of all gradients taken together (inf or nan if any element is)."""
    return norm_and_values(grads)[0]


def clip_scale(norm: float, max_norm: float | None) -> float:
    """``max_norm / norm`` when ``norm`` exceeds ``max_norm``, else 1 (also when it is None)."""
    if max_norm is None or not norm > max_norm:
        return 1.0
    return max_norm / norm


__all__ = ["clip_scale", "global_grad_norm", "norm_and_values", "norm_from_sums", "sum_of_squares"]
