"""The parameters a configuration implies, checked before any model is built.

:func:`expected_shapes` lists every parameter name and shape that
``riftco.nn.DecoderOnlyTransformer(config)`` has (a tied head has no weight of
its own), from the configuration alone; :func:`check_shapes` compares a set of
tensors against it, and :func:`config_from_dict` reads a stored configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from riftco.interchange.errors import ManifestError, WeightsError
from riftco.nn import ConfigError, TransformerConfig


def config_from_dict(data: Any) -> TransformerConfig:
    """A stored configuration; raises ManifestError naming the bad field."""
    if not isinstance(data, Mapping):
        raise ManifestError(f"config: expected an object; found {type(data).__name__}")
    try:
        return TransformerConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise ManifestError(f"config: {exc}") from None


def tensor_count(config: TransformerConfig) -> int:
    """How many parameters ``expected_shapes(config)`` lists, computed without listing them."""
    c = config
    norm = 2 if c.norm == "layer" else 1
    linear = 2 if c.linear_bias else 1
    per_block = 2 * norm + (4 + (2 if c.feed_forward == "gelu" else 3)) * linear
    fixed = 1 + (c.positions == "learned") + norm + (not c.tie_embeddings) + bool(c.head_bias)
    return fixed + c.n_layers * per_block


#: Sizes no file of ours may claim: far past any model this stack runs, and small
#: enough that what a configuration allocates on its own (rotary tables, caches sized
#: by the context) stays bounded.
LIMITS = {
    "context_length": 1 << 20,
    "vocab_size": 1 << 24,
    "d_model": 1 << 16,
    "d_ff": 1 << 18,
    "n_layers": 1 << 12,
    "n_heads": 1 << 12,
}


def check_limits(config: TransformerConfig) -> None:
    """Refuse sizes past `LIMITS` (a ``context_length`` of 2**40 would otherwise
    allocate terabytes of rotary table before a token is read)."""
    for name, limit in LIMITS.items():
        value = getattr(config, name)
        if value > limit:
            raise WeightsError(f"config: {name} {value} is past the supported {limit}")


def check_tensor_count(config: TransformerConfig, found: int) -> None:
    """Refuse a configuration that implies far more tensors than a file holds (say
    ``n_layers = 10**7`` beside 37 tensors), or sizes past `LIMITS`, before anything
    is listed or allocated."""
    check_limits(config)
    expected = tensor_count(config)
    if expected > found + 64:
        raise WeightsError(
            f"tensors disagree with the configuration: it implies {expected} tensors "
            f"(n_layers={config.n_layers}); the file holds {found}"
        )


def expected_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of a model with ``config``, by name, with its shape."""
    c = config
    shapes: dict[str, tuple[int, ...]] = {"token_embedding.weight": (c.vocab_size, c.d_model)}
    if c.positions == "learned":
        shapes["position_embedding.weight"] = (c.context_length, c.d_model)
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    feed_forward: tuple[tuple[str, int, int], ...]
    if c.feed_forward == "gelu":
        feed_forward = (("expand", c.d_ff, c.d_model), ("project", c.d_model, c.d_ff))
    else:
        feed_forward = (
            ("gate", c.d_ff, c.d_model),
            ("up", c.d_ff, c.d_model),
            ("down", c.d_model, c.d_ff),
        )
    for i in range(c.n_layers):
        block = f"blocks.{i}"
        shapes.update(_norm(f"{block}.attention_norm", c))
        for name, out_features, in_features in (
            ("query", q, c.d_model),
            ("key", kv, c.d_model),
            ("value", kv, c.d_model),
            ("output", c.d_model, q),
        ):
            shapes.update(_linear(f"{block}.attention.{name}", out_features, in_features, c))
        shapes.update(_norm(f"{block}.feed_forward_norm", c))
        for name, out_features, in_features in feed_forward:
            shapes.update(_linear(f"{block}.feed_forward.{name}", out_features, in_features, c))
    shapes.update(_norm("final_norm", c))
    if not c.tie_embeddings:
        shapes["language_model_head.weight"] = (c.vocab_size, c.d_model)
    if c.head_bias:
        shapes["language_model_head.bias"] = (c.vocab_size,)
    return shapes


def check_shapes(config: TransformerConfig, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Raise WeightsError naming missing, unexpected and mis-shaped tensors."""
    check_tensor_count(config, len(shapes))
    expected = expected_shapes(config)
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = [
        f"{name} {list(shapes[name])} (expected {list(shape)})"
        for name, shape in expected.items()
        if name in shapes and tuple(shapes[name]) != shape
    ]
    parts = []
    if missing:
        parts.append(f"missing {_few(missing)}")
    if unexpected:
        parts.append(f"unexpected {_few(unexpected)}")
    if wrong:
        parts.append(f"mis-shaped {_few(wrong)}")
    if parts:
        raise WeightsError(f"tensors disagree with the configuration: {'; '.join(parts)}")


def _norm(prefix: str, c: TransformerConfig) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {f"{prefix}.weight": (c.d_model,)}
    if c.norm == "layer":
        shapes[f"{prefix}.bias"] = (c.d_model,)
    return shapes


def _linear(
    prefix: str, out_features: int, in_features: int, c: TransformerConfig
) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {f"{prefix}.weight": (out_features, in_features)}
    if c.linear_bias:
        shapes[f"{prefix}.bias"] = (out_features,)
    return shapes


def _few(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
