"""Time-range cross-entropy: the loss over a contiguous range of positions only."""

from __future__ import annotations

from typing import Any

import numpy as np

import riftco.nn.functional as F
from riftco.cajal.programmed.config import ProgrammedConfigError


def time_range_mask(batch: int, steps: int, start: int, stop: int) -> np.ndarray:
    """``[batch, steps]`` booleans, true at positions ``start <= t < stop``."""
    if not (0 <= start < stop <= steps):
        raise ProgrammedConfigError(
            f"time range: expected 0 <= start < stop <= {steps}, found {start}..{stop}"
        )
    mask = np.zeros((batch, steps), dtype=bool)
    mask[:, start:stop] = True
    return mask


def time_range_cross_entropy(
    logits: Any, targets: Any, start: int, stop: int, weights: Any = None
) -> Any:
    """Mean cross-entropy of ``logits [B, T, V]`` against ``targets [B, T]`` over the
    positions ``start <= t < stop`` (and, with ``weights``, where the weight is nonzero)."""
    batch, steps = logits.shape[0], logits.shape[1]
    mask = time_range_mask(batch, steps, start, stop)
    if weights is not None:
        w = weights.numpy() if hasattr(weights, "numpy") else np.asarray(weights)
        mask &= np.asarray(w).reshape(batch, steps) != 0
    return F.cross_entropy(logits, targets, mask=mask)


class TimeRangeLoss:
    """``time_range_cross_entropy`` as a training-engine loss: ``(logits, targets,
    weights) -> loss``."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = int(start), int(stop)

    def __call__(self, logits: Any, targets: Any, weights: Any = None) -> Any:
        return time_range_cross_entropy(logits, targets, self.start, self.stop, weights)

    def __repr__(self) -> str:
        return f"TimeRangeLoss({self.start}, {self.stop})"
