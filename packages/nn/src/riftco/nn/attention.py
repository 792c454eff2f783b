"""Causal self-attention: multi-head or grouped-query, learned or rotary positions,
an optional sliding window, materialized or Flash kernels; a dense path for
training and an incremental path over a key/value cache."""

from __future__ import annotations

import math
from typing import Any

import riftco.tensor as rt
from riftco.nn import functional as F
from riftco.nn.cache import DecodeStep, KVCache
from riftco.nn.config import TransformerConfig
from riftco.nn.errors import ConfigError
from riftco.nn.joins import Read, decode_linear, fused_projection
from riftco.nn.layers import Linear
from riftco.nn.module import Module
from riftco.tensor import Backend, Tensor


class CausalSelfAttention(Module):
    """Projections ``query``, ``key``, ``value`` (``[heads * head_dim, d_model]``,
    ``[kv_heads * head_dim, d_model]``) and ``output``."""

    def __init__(self, config: TransformerConfig, *, backend: str | Backend | None = None) -> None:
        super().__init__()
        d, h, hkv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim
        bias = config.linear_bias
        self.query = Linear(d, h * dh, bias, backend=backend)
        self.key = Linear(d, hkv * dh, bias, seed=2, backend=backend)
        self.value = Linear(d, hkv * dh, bias, seed=4, backend=backend)
        self.output = Linear(h * dh, d, bias, seed=6, backend=backend)
        self.heads, self.kv_heads, self.head_dim = h, hkv, dh
        self.rotary = config.positions == "rotary"
        self.rope_theta = config.rope_theta
        self.window = config.sliding_window or 0
        self.method = config.attention
        self.scale = 1.0 / math.sqrt(dh)

    def forward(self, x: Any, positions: Tensor | None = None) -> Any:
        """``x [B, T, d_model]``; ``positions [B, T]`` (int64) for rotary models."""
        b, t = x.shape[0], x.shape[1]
        if self.rotary and positions is None:
            raise ConfigError(
                "CausalSelfAttention: a rotary model needs positions [B, T] (int64), found None"
            )
        parts = [fused_projection(p) for p in (self.query, self.key, self.value)]
        if all(part is not None for part in parts):
            weights, biases = zip(*parts)
            a = F.projected_attention(
                x,
                list(weights),
                None if biases[0] is None else list(biases),
                heads=self.heads,
                kv_heads=self.kv_heads,
                head_dim=self.head_dim,
                positions=positions if self.rotary else None,
                theta=self.rope_theta,
                window=self.window,
                method=self.method,
                scale=self.scale,
            )
            return self.output(a)
        # Layers that cannot join a fused projection (LoRA, NF4) keep their own nodes.
        q = self.query(x).reshape(b, t, self.heads, self.head_dim)
        k = self.key(x).reshape(b, t, self.kv_heads, self.head_dim)
        v = self.value(x).reshape(b, t, self.kv_heads, self.head_dim)
        if self.rotary and positions is not None:
            q = F.rotary(q, positions, self.rope_theta)
            k = F.rotary(k, positions, self.rope_theta)
        a = F.attention(q, k, v, window=self.window, method=self.method, scale=self.scale)
        return self.output(a.reshape(b, t, self.heads * self.head_dim))

    def forward_incremental(
        self, x: Tensor, positions: Tensor, cache: KVCache, step: DecodeStep, layer: int
    ) -> Tensor:
        """Packed new tokens ``x [N, d_model]`` at ``positions [N]``: append their keys
        and values to ``cache`` and attend each sequence's queries over its own keys."""
        n = x.shape[0]
        q = self.query(x).reshape(n, self.heads, self.head_dim)
        k = self.key(x).reshape(n, self.kv_heads, self.head_dim)
        v = self.value(x).reshape(n, self.kv_heads, self.head_dim)
        if self.rotary:
            q = F.rotary(q, positions, self.rope_theta)
            k = F.rotary(k, positions, self.rope_theta)
        cache.append(step, layer, k, v)
        a = cache.attend(step, layer, q, scale=self.scale, window=self.window)
        return self.output(a.reshape(n, self.heads * self.head_dim))

    def decode_projections(self, read: Read) -> dict[str, rt.DecodeLinear] | None:
        """Query, key, value and output as a whole-step program's linears by role, or
        None."""
        layers = {"query": self.query, "key": self.key, "value": self.value, "output": self.output}
        linears = {role: decode_linear(p, read) for role, p in layers.items()}
        if any(lin is None for lin in linears.values()):
            return None
        return linears  # type: ignore[return-value]  # no None left

    def extra_repr(self) -> str:
        extra = f", window={self.window}" if self.window else ""
        return (
            f"heads={self.heads}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
            f"{'rotary' if self.rotary else 'learned'} positions, {self.method}{extra}"
        )


__all__ = ["CausalSelfAttention"]
