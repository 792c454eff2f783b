"""Basic layers: Linear, Embedding, LayerNorm, RMSNorm, GELU, SiLU, Dropout.

Each layer takes Variables (recording gradients) or Tensors (inference: no graph,
Tensors out). Standalone layers initialize from a seed; a model re-initializes its
parameters by name (see ``transformer.initialize``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, is_grad_enabled
from riftco.autograd import embedding as ag_embedding
from riftco.nn import functional as F
from riftco.nn.errors import ConfigError
from riftco.nn.joins import Read
from riftco.nn.module import Module
from riftco.tensor import Backend, Tensor


def _positive(layer: str, **sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{layer}: {name} must be a positive int, found {value!r}")


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight [out_features, in_features]``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        seed: int = 0,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight = Parameter(
            rt.uniform((out_features, in_features), -bound, bound, seed=seed, backend=backend)
        )
        if bias:
            self.bias = Parameter(
                rt.uniform((out_features,), -bound, bound, seed=seed + 1, backend=backend)
            )
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)

    def fused_projection(self) -> tuple[Parameter, Parameter | None] | None:
        """Its weight and bias, for a fused projection (riftco.nn.joins)."""
        return self.weight, self.bias

    def decode_linear(self, read: Read) -> rt.DecodeLinear | None:
        """The float32 weight and bias, read in place (riftco.nn.joins)."""
        weight = read(self.weight)
        assert weight is not None  # a Linear always has its weight
        return rt.DecodeLinear.of(weight, read(self.bias))

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Rows of ``weight [num_embeddings, dim]`` for int64 ids of any shape."""

    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        *,
        seed: int = 0,
        std: float = 1.0,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        _positive("Embedding", num_embeddings=num_embeddings, dim=dim)
        self.num_embeddings, self.dim = num_embeddings, dim
        self.weight = Parameter(
            rt.normal((num_embeddings, dim), std=std, seed=seed, backend=backend)
        )

    def forward(self, ids: Tensor) -> Any:
        """A Variable while recording gradients for the weight, else a Tensor."""
        if is_grad_enabled() and self.weight.requires_grad:
            return ag_embedding(self.weight, ids)
        return rt.embedding(self.weight.value, ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.dim}"


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""

    def __init__(
        self,
        dim: int,
        eps: float = 1e-5,
        bias: bool = True,
        *,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        _positive("LayerNorm", dim=dim)
        self.dim, self.eps = dim, float(eps)
        self.weight = Parameter(rt.ones(dim, backend=backend))
        if bias:
            self.bias = Parameter(rt.zeros(dim, backend=backend))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Any:
        return F.layer_norm(x, self.weight, self.bias, self.eps)

    def decode_norm(self, read: Read) -> tuple[str, float, rt.DecodeNorm]:
        """``("layer", eps, weights)`` for a whole-step program."""
        return "layer", self.eps, rt.DecodeNorm(read(self.weight), read(self.bias))

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}"


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""

    def __init__(
        self, dim: int, eps: float = 1e-6, *, backend: str | Backend | None = None
    ) -> None:
        super().__init__()
        _positive("RMSNorm", dim=dim)
        self.dim, self.eps = dim, float(eps)
        self.weight = Parameter(rt.ones(dim, backend=backend))

    def forward(self, x: Any) -> Any:
        return F.rms_norm(x, self.weight, self.eps)

    def decode_norm(self, read: Read) -> tuple[str, float, rt.DecodeNorm]:
        """``("rms", eps, weights)`` for a whole-step program."""
        return "rms", self.eps, rt.DecodeNorm(read(self.weight))

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}"


class GELU(Module):
    """GELU: ``approximate="none"`` (exact) or ``"tanh"`` (GPT-2's)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ConfigError(f"GELU: approximate must be 'none' or 'tanh', found {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Any) -> Any:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def forward(self, x: Any) -> Any:
        return F.silu(x)


class Dropout(Module):
    """Zero elements with probability ``p`` in train mode (an identity in eval mode).
    Masks come from a PCG64 stream seeded by ``seed``: call ``n`` of a module uses
    the seed ``(seed, n)``, or the explicit ``key`` a caller passes (so a replay, as
    in activation checkpointing, draws the same mask)."""

    def __init__(self, p: float = 0.0, *, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"Dropout: p must be in [0, 1), found {p!r}")
        self.p, self.seed, self.calls = float(p), int(seed), 0

    def next_key(self) -> int:
        """The key of the next call (and advance the stream)."""
        key = int(np.random.SeedSequence([self.seed, self.calls]).generate_state(1)[0])
        self.calls += 1
        return key

    def forward(self, x: Any, key: int | None = None) -> Any:
        if not self.training or self.p == 0.0:
            return x
        return F.dropout(x, self.p, self.next_key() if key is None else key)

    def extra_repr(self) -> str:
        return f"p={self.p:g}"


__all__ = ["GELU", "Dropout", "Embedding", "LayerNorm", "Linear", "RMSNorm", "SiLU"]
