"""Position-wise feed-forward layers: GELU (GPT) and SwiGLU (Llama)."""

from __future__ import annotations

from typing import Any

import riftco.tensor as rt
from riftco.nn import functional as F
from riftco.nn.config import TransformerConfig
from riftco.nn.joins import Read, decode_linear
from riftco.nn.layers import Linear
from riftco.nn.module import Module
from riftco.tensor import Backend


class FeedForward(Module):
    """``project(gelu(expand(x)))``; ``gelu`` is ``exact`` or ``tanh``."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        gelu: str = "tanh",
        bias: bool = True,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        self.expand = Linear(d_model, d_ff, bias, backend=backend)
        self.project = Linear(d_ff, d_model, bias, seed=2, backend=backend)
        self.approximate = "none" if gelu == "exact" else "tanh"

    def forward(self, x: Any) -> Any:
        return self.project(F.gelu(self.expand(x), self.approximate))

    def decode_feed_forward(self, read: Read) -> tuple[str, dict[str, rt.DecodeLinear]] | None:
        """``(kind, linears by role)`` for a whole-step program, None if a linear cannot
        join."""
        kind = "gelu" if self.approximate == "none" else "gelu_tanh"
        return _joined(kind, {"expand": self.expand, "project": self.project}, read)

    def extra_repr(self) -> str:
        return f"gelu={'exact' if self.approximate == 'none' else 'tanh'}"


class SwiGLU(Module):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(
        self, d_model: int, d_ff: int, *, bias: bool = False, backend: str | Backend | None = None
    ) -> None:
        super().__init__()
        self.gate = Linear(d_model, d_ff, bias, backend=backend)
        self.up = Linear(d_model, d_ff, bias, seed=2, backend=backend)
        self.down = Linear(d_ff, d_model, bias, seed=4, backend=backend)

    def forward(self, x: Any) -> Any:
        return self.down(F.swiglu(self.gate(x), self.up(x)))

    def decode_feed_forward(self, read: Read) -> tuple[str, dict[str, rt.DecodeLinear]] | None:
        """``("swiglu", {gate, up, down})`` for a whole-step program, or None."""
        return _joined("swiglu", {"gate": self.gate, "up": self.up, "down": self.down}, read)


def _joined(
    kind: str, layers: dict[str, Module], read: Read
) -> tuple[str, dict[str, rt.DecodeLinear]] | None:
    linears = {role: decode_linear(m, read) for role, m in layers.items()}
    if any(lin is None for lin in linears.values()):
        return None
    return kind, linears  # type: ignore[return-value]  # no None left


def feed_forward_for(config: TransformerConfig, backend: str | Backend | None = None) -> Module:
    """The feed-forward layer a configuration selects."""
    if config.feed_forward == "swiglu":
        return SwiGLU(config.d_model, config.d_ff, bias=config.linear_bias, backend=backend)
    return FeedForward(
        config.d_model, config.d_ff, gelu=config.gelu, bias=config.linear_bias, backend=backend
    )


__all__ = ["FeedForward", "SwiGLU", "feed_forward_for"]
