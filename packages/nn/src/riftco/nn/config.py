"""``TransformerConfig``: sizes and the fields that select a decoder topology, with
presets (``gpt2``, ``riftco_v1``, ``llama``) and validation."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riftco.nn.errors import ConfigError

#: Topology presets: the fields each sets (sizes come from the defaults or a size preset).
PRESETS: dict[str, dict[str, Any]] = {
    # GPT-2: learned positions, pre-LayerNorm, tanh GELU, biased projections, no head bias,
    # an untied head (exportable to Hugging Face GPT-2 and llama.cpp).
    "gpt2": dict(
        norm="layer",
        positions="learned",
        feed_forward="gelu",
        gelu="tanh",
        linear_bias=True,
        head_bias=False,
        tie_embeddings=False,
        kv_heads=None,
        sliding_window=None,
        norm_eps=1e-5,
    ),
    # The original Riftco Transformer: GPT topology with a biased head and exact GELU.
    "riftco_v1": dict(
        norm="layer",
        positions="learned",
        feed_forward="gelu",
        gelu="exact",
        linear_bias=True,
        head_bias=True,
        tie_embeddings=False,
        kv_heads=None,
        sliding_window=None,
        norm_eps=1e-5,
    ),
    # Llama / Mistral: RMSNorm, rotary positions, bias-free projections, grouped-query
    # attention, SwiGLU; set sliding_window for Mistral.
    "llama": dict(
        norm="rms",
        positions="rotary",
        feed_forward="swiglu",
        gelu="exact",
        linear_bias=False,
        head_bias=False,
        tie_embeddings=False,
        kv_heads=None,
        sliding_window=None,
        norm_eps=1e-6,
        rope_theta=10000.0,
    ),
}

#: Size presets.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(vocab_size=256, context_length=64, d_model=128, n_heads=4, n_layers=2, d_ff=512),
    "small": dict(
        vocab_size=512, context_length=256, d_model=384, n_heads=6, n_layers=6, d_ff=1536
    ),
}

_CHOICES = {
    "norm": ("layer", "rms"),
    "positions": ("learned", "rotary"),
    "feed_forward": ("gelu", "swiglu"),
    "gelu": ("exact", "tanh"),
    "attention": ("flash", "materialized"),
}


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only Transformer. The defaults are the ``gpt2`` topology at the ``tiny``
    size. ``kv_heads`` None means one key/value head per query head."""

    vocab_size: int = 256
    context_length: int = 64
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 512
    kv_heads: int | None = None
    norm: str = "layer"
    norm_eps: float = 1e-5
    positions: str = "learned"
    rope_theta: float = 10000.0
    feed_forward: str = "gelu"
    gelu: str = "tanh"
    linear_bias: bool = True
    head_bias: bool = False
    tie_embeddings: bool = False
    sliding_window: int | None = None
    attention: str = "flash"
    dropout: float = 0.0
    checkpoint: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived ----------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads if self.kv_heads is None else self.kv_heads

    @property
    def family(self) -> str:
        """``gpt`` (learned positions) or ``llama`` (rotary)."""
        return "gpt" if self.positions == "learned" else "llama"

    # -- making -----------------------------------------------------------------
    @classmethod
    def preset(
        cls, name: str = "gpt2", size: str | None = None, **overrides: Any
    ) -> TransformerConfig:
        """A topology preset (``gpt2``, ``riftco_v1``, ``llama``), optionally at a size
        preset (``tiny``, ``small``), with any field overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
        fields: dict[str, Any] = dict(PRESETS[name])
        if size is not None:
            if size not in SIZES:
                raise ConfigError(f"unknown size {size!r}; expected one of {sorted(SIZES)}")
            fields.update(SIZES[size])
        fields.update(overrides)
        return cls.from_dict(fields)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransformerConfig:
        """Fields by name; a ``preset`` key starts from that preset. Unknown keys raise."""
        data = dict(data)
        name = data.pop("preset", None)
        if name is not None:
            return cls.preset(name, **data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"TransformerConfig: unknown fields {unknown}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TransformerConfig:
        return dataclasses.replace(self, **changes)

    def check_length(self, length: int) -> None:
        """Raise ConfigError for a sequence (or a position) beyond the context."""
        if length > self.context_length:
            raise ConfigError(
                f"a sequence of {length} tokens is longer than the context "
                f"length {self.context_length}"
            )


def _validate(c: TransformerConfig) -> None:
    for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "d_ff"):
        value = getattr(c, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"TransformerConfig.{name} must be a positive int, found {value!r}")
    for name, allowed in _CHOICES.items():
        if getattr(c, name) not in allowed:
            raise ConfigError(
                f"TransformerConfig.{name} must be one of {allowed}, found {getattr(c, name)!r}"
            )
    if c.d_model % c.n_heads:
        raise ConfigError(
            f"TransformerConfig: d_model {c.d_model} is not divisible by n_heads {c.n_heads}"
        )
    if c.kv_heads is not None:
        if not isinstance(c.kv_heads, int) or c.kv_heads <= 0 or c.n_heads % c.kv_heads:
            raise ConfigError(
                f"TransformerConfig: kv_heads must be a positive divisor of "
                f"n_heads {c.n_heads}, found {c.kv_heads!r}"
            )
    if c.positions == "rotary" and c.head_dim % 2:
        raise ConfigError(
            f"TransformerConfig: rotary positions need an even head dimension, "
            f"found {c.head_dim} (d_model {c.d_model} / n_heads {c.n_heads})"
        )
    if c.sliding_window is not None and (
        not isinstance(c.sliding_window, int) or c.sliding_window <= 0
    ):
        raise ConfigError(
            f"TransformerConfig.sliding_window must be None or a positive int, "
            f"found {c.sliding_window!r}"
        )
    for name in ("norm_eps", "rope_theta", "init_std"):
        value = getattr(c, name)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"TransformerConfig.{name} must be a positive number, found {value!r}"
            )
    if not isinstance(c.dropout, (int, float)) or not 0.0 <= c.dropout < 1.0:
        raise ConfigError(f"TransformerConfig.dropout must be in [0, 1), found {c.dropout!r}")
    for name in ("linear_bias", "head_bias", "tie_embeddings", "checkpoint"):
        if not isinstance(getattr(c, name), bool):
            raise ConfigError(
                f"TransformerConfig.{name} must be a bool, found {getattr(c, name)!r}"
            )


__all__ = ["PRESETS", "SIZES", "TransformerConfig"]
