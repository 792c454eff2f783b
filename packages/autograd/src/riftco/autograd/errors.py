"""Typed errors of riftco.autograd, under riftco.tensor's ``RiftcoError``."""

from __future__ import annotations

from riftco.tensor import RiftcoError


class GradientError(RiftcoError, RuntimeError):
    """A backward pass that cannot run: no graph, a freed graph, a bad seed, or a VJP
    (custom or replayed) that returned gradients of the wrong count, shape or backend."""


class StaleGraphError(GradientError):
    """A value saved by the graph changed after the forward pass (an in-place update,
    or a variable that now holds another tensor); recompute the forward pass."""


__all__ = ["GradientError", "StaleGraphError"]
