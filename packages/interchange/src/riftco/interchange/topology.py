"""The math-relevant shape of a model, and the parameters it must have.

:class:`Topology` is what the converters need to know about a configuration:
sizes, the family (``gpt`` or ``llama``) and the fields that change the math
(GELU form, biases, tied head, rotary base, sliding window). It comes from a
``riftco.nn`` configuration through :func:`topology_from_config`, and
:func:`expected_shapes` lists every parameter name and shape such a model has,
which is how a bundle's tensors are checked against its configuration before
any model is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from riftco.interchange.errors import WeightsError

Family = Literal["gpt", "llama"]


@dataclass(frozen=True)
class Topology:
    family: Family
    vocab_size: int
    context_length: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    norm_eps: float = 1e-5
    gelu: Literal["exact", "tanh"] = "tanh"
    linear_bias: bool = True
    head_bias: bool = False
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    sliding_window: int | None = None

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def expected_shapes(topology: Topology) -> dict[str, tuple[int, ...]]:
    """Every parameter of a model with ``topology``, by name, with its shape."""
    t = topology
    shapes: dict[str, tuple[int, ...]] = {"token_embedding.weight": (t.vocab_size, t.d_model)}
    if t.family == "gpt":
        shapes["position_embedding.weight"] = (t.context_length, t.d_model)
    for i in range(t.n_layers):
        block = f"blocks.{i}"
        shapes.update(_norm(f"{block}.attention_norm", t))
        kv = t.n_kv_heads * t.head_dim
        q = t.n_heads * t.head_dim
        for name, out_features, in_features in (
            ("query", q, t.d_model),
            ("key", kv, t.d_model),
            ("value", kv, t.d_model),
            ("output", t.d_model, q),
        ):
            shapes.update(_linear(f"{block}.attention.{name}", out_features, in_features, t))
        shapes.update(_norm(f"{block}.feed_forward_norm", t))
        if t.family == "gpt":
            shapes.update(_linear(f"{block}.feed_forward.expand", t.d_ff, t.d_model, t))
            shapes.update(_linear(f"{block}.feed_forward.project", t.d_model, t.d_ff, t))
        else:
            for name, out_features, in_features in (
                ("gate", t.d_ff, t.d_model),
                ("up", t.d_ff, t.d_model),
                ("down", t.d_model, t.d_ff),
            ):
                shapes.update(_linear(f"{block}.feed_forward.{name}", out_features, in_features, t))
    shapes.update(_norm("final_norm", t))
    if not t.tie_embeddings:
        shapes["language_model_head.weight"] = (t.vocab_size, t.d_model)
    if t.head_bias:
        shapes["language_model_head.bias"] = (t.vocab_size,)
    return shapes


def check_shapes(topology: Topology, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise WeightsError naming missing, unexpected and mis-shaped tensors."""
    expected = expected_shapes(topology)
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = [
        f"{name} {list(shapes[name])} (expected {list(shape)})"
        for name, shape in expected.items()
        if name in shapes and tuple(shapes[name]) != shape
    ]
    if missing or unexpected or wrong:
        parts = []
        if missing:
            parts.append(f"missing {_few(missing)}")
        if unexpected:
            parts.append(f"unexpected {_few(unexpected)}")
        if wrong:
            parts.append(f"mis-shaped {_few(wrong)}")
        raise WeightsError(f"tensors disagree with the configuration: {'; '.join(parts)}")


def _norm(prefix: str, t: Topology) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.weight": (t.d_model,)}
    if t.family == "gpt":
        shapes[f"{prefix}.bias"] = (t.d_model,)
    return shapes


def _linear(
    prefix: str, out_features: int, in_features: int, t: Topology
) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.weight": (out_features, in_features)}
    if t.linear_bias:
        shapes[f"{prefix}.bias"] = (out_features,)
    return shapes


def _few(items: list[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
