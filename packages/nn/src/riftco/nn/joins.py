"""How a layer joins a fused projection or a whole-step decoding program.

Layers answer for themselves: a linear-like layer says what it contributes to a fused
projection (several linears over one input run as one product, as attention's query,
key and value do in training) and to riftco.tensor's whole-step ``Decoder``, or None
when it cannot join (an adapted layer keeps its own nodes; a custom layer decodes op by
op). Callers ask through the two functions here and never switch on layer types.

``read`` is the decoder builder's way to take a parameter's current value: it records
the parameter, so the decoder is rebuilt when the value is replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import riftco.tensor as rt
from riftco.autograd import Parameter

#: A parameter (or None) -> its current value (or None), recorded by the builder.
Read = Callable[[Parameter | None], rt.Tensor | None]


@runtime_checkable
class JoinsFusedProjection(Protocol):
    def fused_projection(self) -> tuple[Parameter, Parameter | None] | None:
        """The weight and bias this layer adds to a fused projection, or None."""
        ...


@runtime_checkable
class JoinsWholeStep(Protocol):
    def decode_linear(self, read: Read) -> rt.DecodeLinear | None:
        """This layer as a linear of a whole-step program, or None."""
        ...


@runtime_checkable
class JoinsWholeStepNorm(Protocol):
    def decode_norm(self, read: Read) -> tuple[str, float, rt.DecodeNorm]:
        """``(kind, eps, weights)``: ``layer`` or ``rms``, for a whole-step program."""
        ...


@runtime_checkable
class JoinsWholeStepFeedForward(Protocol):
    def decode_feed_forward(self, read: Read) -> tuple[str, dict[str, rt.DecodeLinear]] | None:
        """``(kind, linears by role)`` for a whole-step program, or None."""
        ...


def fused_projection(layer: object) -> tuple[Parameter, Parameter | None] | None:
    """What ``layer`` adds to a fused projection; None when it cannot join one."""
    return layer.fused_projection() if isinstance(layer, JoinsFusedProjection) else None


def decode_linear(layer: object, read: Read) -> rt.DecodeLinear | None:
    """``layer`` as a whole-step program's linear; None when it cannot be one."""
    return layer.decode_linear(read) if isinstance(layer, JoinsWholeStep) else None


def decode_norm(layer: object, read: Read) -> tuple[str, float, rt.DecodeNorm] | None:
    """``layer`` as a whole-step program's norm; None when it cannot be one."""
    return layer.decode_norm(read) if isinstance(layer, JoinsWholeStepNorm) else None


def decode_feed_forward(layer: object, read: Read) -> tuple[str, dict[str, rt.DecodeLinear]] | None:
    """``layer`` as a whole-step program's feed-forward; None when it cannot be one."""
    return layer.decode_feed_forward(read) if isinstance(layer, JoinsWholeStepFeedForward) else None


__all__ = [
    "JoinsFusedProjection",
    "JoinsWholeStep",
    "JoinsWholeStepFeedForward",
    "JoinsWholeStepNorm",
    "Read",
    "decode_feed_forward",
    "decode_linear",
    "decode_norm",
    "fused_projection",
]
