"""LoRA: low-rank adapters on the linear layers of a model.

An adapted linear computes ``y = x W^T + b + (alpha / r) (x A^T) B^T`` with
``A [r, in]`` (Xavier-uniform, seeded per layer name) and ``B [out, r]`` (zeros),
so attaching changes no logit. The adapters are child modules named ``lora_a`` and
``lora_b`` of the adapted layer (``blocks.0.attention.query.lora_a.weight``); the
base's own parameter names do not change.

``attach_lora`` freezes every parameter of the model (``requires_grad=False``) and
adds the adapters, which alone train; ``detach_lora`` removes them and
``merge_lora`` folds them into the base weights (``W += (alpha / r) B A``), both
restoring each parameter's previous ``requires_grad``. Merging is transactional
(every merged weight is computed and checked before any is written) and one-way
(the adapters are gone afterwards). A quantized base (``QuantizedLinear``) is
dequantized and merged into a float32 ``Linear``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, Variable
from riftco.nn.errors import ConfigError, StateDictError
from riftco.nn.joins import Read
from riftco.nn.layers import Linear
from riftco.nn.module import Module, _as_tensor
from riftco.nn.quantized import QuantizedLinear, to_linear
from riftco.nn.transformer import LanguageModelHead
from riftco.tensor import RiftcoError, Tensor

#: Module names (suffixes of qualified names) that can take adapters.
LORA_TARGETS = (
    "attention.query",
    "attention.key",
    "attention.value",
    "attention.output",
    "feed_forward.expand",
    "feed_forward.project",
    "feed_forward.gate",
    "feed_forward.up",
    "feed_forward.down",
    "language_model_head",
)


class AdapterError(RiftcoError, ValueError):
    """An adapter operation does not fit the model's state (adapters already attached,
    none attached, a non-finite merge, or saving a model whose adapters are unmerged)."""


@dataclass(frozen=True)
class LoraConfig:
    """``rank`` r, ``alpha`` (the update is scaled by ``alpha / rank``), the ``targets``
    (entries of ``LORA_TARGETS``) and the ``seed`` of the A initialization."""

    rank: int = 4
    alpha: float = 8.0
    targets: tuple[str, ...] = ("attention.query", "attention.value")
    seed: int = 0

    def __post_init__(self) -> None:
        if (
            isinstance(self.rank, bool)
            or not isinstance(self.rank, (int, np.integer))
            or self.rank < 1
        ):
            raise ConfigError(f"LoraConfig: rank must be a positive int, found {self.rank!r}")
        alpha = self.alpha
        if (
            isinstance(alpha, bool)
            or not isinstance(alpha, (int, float))
            or not (math.isfinite(alpha) and alpha > 0)
        ):
            raise ConfigError(f"LoraConfig: alpha must be a positive number, found {alpha!r}")
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        unknown = [t for t in targets if t not in LORA_TARGETS]
        if not targets or unknown or len(set(targets)) != len(targets):
            raise ConfigError(
                f"LoraConfig: targets must be distinct names from {list(LORA_TARGETS)}, "
                f"found {list(targets)}"
            )
        object.__setattr__(self, "rank", int(self.rank))
        object.__setattr__(self, "alpha", float(alpha))
        object.__setattr__(self, "targets", targets)
        object.__setattr__(self, "seed", int(self.seed))

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "alpha": self.alpha,
            "targets": list(self.targets),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoraConfig:
        unknown = set(data) - {"rank", "alpha", "targets", "seed"}
        if unknown:
            raise ConfigError(f"LoraConfig: unknown fields {sorted(unknown)}")
        return cls(**{**data, "targets": tuple(data.get("targets", cls.targets))})


def _seed_for(seed: int, name: str) -> int:
    return int(np.random.SeedSequence([seed, zlib.crc32(name.encode())]).generate_state(1)[0])


def _add(y: Any, delta: Any) -> Any:
    # A frozen base on a Tensor input gives a Tensor; the adapters give a Variable.
    return delta + y if isinstance(delta, Variable) and not isinstance(y, Variable) else y + delta


class LoraAdapter:
    """What every adapted layer adds: ``lora_a``, ``lora_b`` and the update."""

    is_lora_adapted = True
    rank: int
    alpha: float
    scaling: float
    # The layer adapted, held (in a tuple, so not registered as a child: its state is
    # this layer's own, adopted).
    _lora_base: tuple[Module]

    def _attach(
        self, base: Module, in_features: int, out_features: int, config: LoraConfig, seed: int
    ) -> None:
        backend = self._base_backend(base)
        self._lora_base = (base,)
        self.rank, self.alpha, self.scaling = config.rank, config.alpha, config.scaling
        bound = math.sqrt(6.0 / (in_features + config.rank))
        a = Linear(in_features, config.rank, bias=False, backend=backend)
        a.weight.value.assign_(
            rt.uniform((config.rank, in_features), -bound, bound, seed=seed, backend=backend)
        )
        b = Linear(config.rank, out_features, bias=False, backend=backend)
        b.weight.value.assign_(rt.zeros((out_features, config.rank), backend=backend))
        a.training = b.training = base.training
        self.lora_a, self.lora_b = a, b

    @staticmethod
    def _base_backend(base: Module) -> Any:
        for _, p in base.named_parameters():
            return p.value.backend
        return next(b for _, b in base.named_buffers()).backend

    @property
    def base_layer(self) -> Module:
        """The layer the adapters were attached to (restored by detach and merge), holding
        this layer's current buffers (``to()`` may have moved them)."""
        (base,) = self._lora_base
        assert isinstance(self, Module)  # every adapter class is a Module too
        for key, value in self.named_buffers(recurse=False):
            setattr(base, key, value)  # a registered buffer: its place and persistence stay
        return base

    def fused_projection(self) -> None:
        """An adapted layer keeps its own nodes: it joins no fused projection."""
        return None

    def decode_linear(self, read: Read) -> None:
        """Nor a whole-step program (the adapters' update is not in the native step)."""
        return None

    def lora_update(self, x: Any) -> Any:
        """``(alpha / r) (x A^T) B^T`` (the scale applied to the rank-r intermediate)."""
        return self.lora_b(self.lora_a(x) * self.scaling)

    def delta_weight(self) -> Tensor:
        """``(alpha / r) B A``, the change a merge adds to the base weight."""
        b, a = self.lora_b.weight.value, self.lora_a.weight.value
        return rt.matmul(b, a) * self.scaling

    def _lora_repr(self) -> str:
        return f", lora rank={self.rank}, alpha={self.alpha:g}"


class LoraLinear(LoraAdapter, Linear):
    """A ``Linear`` with adapters (its ``weight`` and ``bias`` are the base's)."""

    def __init__(self, base: Linear, config: LoraConfig, seed: int = 0) -> None:
        self.adopt(base)
        self._attach(base, base.in_features, base.out_features, config, seed)

    def forward(self, x: Any) -> Any:
        return _add(super().forward(x), self.lora_update(x))

    def extra_repr(self) -> str:
        return super().extra_repr() + self._lora_repr()


class LoraQuantizedLinear(LoraAdapter, QuantizedLinear):
    """A ``QuantizedLinear`` (NF4 base) with float32 adapters: QLoRA's layer."""

    def __init__(self, base: QuantizedLinear, config: LoraConfig, seed: int = 0) -> None:
        self.adopt(base)
        self._attach(base, base.in_features, base.out_features, config, seed)

    def forward(self, x: Any) -> Any:
        return _add(super().forward(x), self.lora_update(x))

    def extra_repr(self) -> str:
        return super().extra_repr() + self._lora_repr()


class LoraLanguageModelHead(LoraAdapter, LanguageModelHead):
    """An untied language-model head with adapters."""

    def __init__(self, base: LanguageModelHead, config: LoraConfig, seed: int = 0) -> None:
        if base.tied:
            raise AdapterError(
                "LoRA: the language model head is tied to the token embedding; adapting it "
                "would change the embedding too (leave 'language_model_head' out of targets)"
            )
        self.adopt(base)
        vocab, d_model = base.weight.shape
        self._attach(base, d_model, vocab, config, seed)

    def forward(self, x: Any, embedding: Parameter) -> Any:
        return _add(super().forward(x, embedding), self.lora_update(x))

    def extra_repr(self) -> str:
        return super().extra_repr() + self._lora_repr()


_ADAPTED: dict[type, type] = {
    Linear: LoraLinear,
    QuantizedLinear: LoraQuantizedLinear,
    LanguageModelHead: LoraLanguageModelHead,
}


@dataclass
class _LoraState:
    config: LoraConfig
    modules: list[str]
    requires_grad: dict[str, bool] = field(default_factory=dict)


def _state(model: Module) -> _LoraState | None:
    return getattr(model, "_lora_state", None)


def lora_config(model: Module) -> LoraConfig | None:
    """The configuration of the attached adapters, or None."""
    state = _state(model)
    return None if state is None else state.config


def adapted_modules(model: Module) -> dict[str, LoraAdapter]:
    """Every adapted layer, by qualified name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoraAdapter)}


def has_adapters(model: Module) -> bool:
    return bool(adapted_modules(model))


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def attach_lora(model: Module, config: LoraConfig) -> list[str]:
    """Add adapters to the layers ``config.targets`` names and freeze everything else;
    returns the adapted layers' names. Nothing changes if a target matches no layer
    or a layer cannot be adapted."""
    if not isinstance(config, LoraConfig):
        raise TypeError(f"attach_lora: expected a LoraConfig, found {type(config).__name__}")
    if has_adapters(model):
        raise AdapterError(
            "attach_lora: the model already has adapters; merge or detach them first"
        )
    chosen: list[tuple[str, Module]] = []
    for target in config.targets:
        found = [(n, m) for n, m in model.named_modules() if n and _matches(n, target)]
        if not found:
            raise ConfigError(f"LoraConfig: target {target!r} matches no layer of this model")
        for n, m in found:
            if type(m) not in _ADAPTED:
                raise ConfigError(
                    f"attach_lora: {n!r} is a {type(m).__name__}, which cannot take adapters"
                )
        chosen.extend(found)
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    chosen.sort(key=lambda item: order[item[0]])
    made = [(n, _ADAPTED[type(m)](m, config, _seed_for(config.seed, n))) for n, m in chosen]
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    for _, p in model.named_parameters():
        p.requires_grad = False
    for name, adapted in made:
        model.replace_child(name, adapted)
    model._lora_state = _LoraState(config, [n for n, _ in made], flags)
    return [n for n, _ in made]


def _restore_flags(model: Module, state: _LoraState) -> None:
    for name, p in model.named_parameters():
        if name in state.requires_grad:
            p.requires_grad = state.requires_grad[name]


def _require(model: Module, op: str) -> tuple[_LoraState, dict[str, LoraAdapter]]:
    state, adapted = _state(model), adapted_modules(model)
    if state is None or not adapted:
        raise AdapterError(f"{op}: the model has no adapters attached")
    return state, adapted


def detach_lora(model: Module) -> list[str]:
    """Remove the adapters (discarding them) and restore the base layers and every
    parameter's ``requires_grad``; returns the layers' names."""
    state, adapted = _require(model, "detach_lora")
    for name, m in adapted.items():
        model.replace_child(name, m.base_layer)
    _restore_flags(model, state)
    delattr(model, "_lora_state")
    return list(adapted)


def merge_lora(model: Module) -> list[str]:
    """Fold every adapter into its base weight (``W += (alpha / r) B A``) and remove it;
    returns the layers' names. A quantized base becomes a float32 ``Linear`` holding its
    dequantized weight plus the update. Every merged weight is computed and checked
    (finite) before any is written, so an error changes nothing."""
    state, adapted = _require(model, "merge_lora")
    staged = []
    for name, m in adapted.items():
        if isinstance(m, QuantizedLinear):
            merged = m.dequantized_weight() + m.delta_weight()
        else:
            assert isinstance(m, (Linear, LanguageModelHead))  # the float32 adapted kinds
            merged = m.weight.value + m.delta_weight()
        if not np.isfinite(merged.numpy()).all():
            raise AdapterError(
                f"merge_lora: merging {name!r} gives non-finite weights; nothing changed"
            )
        staged.append((name, m, merged))
    for name, m, merged in staged:
        base = m.base_layer
        if isinstance(base, QuantizedLinear):
            model.replace_child(name, to_linear(base, merged))
        else:
            assert isinstance(base, (Linear, LanguageModelHead))
            base.weight.value.assign_(merged)
            model.replace_child(name, base)
    _restore_flags(model, state)
    for _, m, _ in staged:
        base = m.base_layer
        if isinstance(base, QuantizedLinear) and base.bias is not None:
            base.bias.requires_grad = base.bias_requires_grad
    delattr(model, "_lora_state")
    return list(adapted)


def lora_parameters(model: Module) -> list[tuple[str, Parameter]]:
    """The adapters' parameters by qualified name (what trains)."""
    return [(n, p) for n, p in model.named_parameters() if _is_adapter_name(n)]


def _is_adapter_name(name: str) -> bool:
    return ".lora_a." in name or ".lora_b." in name or name.startswith(("lora_a.", "lora_b."))


def lora_state_dict(model: Module) -> dict[str, Tensor]:
    """The adapters' values by qualified name (a small file's worth)."""
    _require(model, "lora_state_dict")
    return {n: p.value for n, p in lora_parameters(model)}


def load_lora_state_dict(model: Module, state: Mapping[str, Any]) -> None:
    """Copy adapter values (Tensors or arrays) into the attached adapters; every adapter
    must be given and nothing else. Nothing is written unless everything fits."""
    _require(model, "load_lora_state_dict")
    own = dict(lora_parameters(model))
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise StateDictError(
            f"load_lora_state_dict: missing keys {missing}, unexpected keys {unexpected}"
        )
    staged = [(own[n].value, _as_tensor(n, state[n], own[n].value)) for n in own]
    for target, value in staged:
        target.assign_(value)


def check_exportable(model: Module, action: str = "save a bundle") -> None:
    """Raise ``AdapterError`` unless ``model`` is plain float32: no unmerged adapters
    and no quantized layers (what a ``.rift`` bundle can hold)."""
    adapted = list(adapted_modules(model))
    if adapted:
        shown = ", ".join(adapted[:3]) + (", ..." if len(adapted) > 3 else "")
        raise AdapterError(
            f"cannot {action}: the model has active, unmerged LoRA adapters on {len(adapted)} "
            f"layers ({shown}); merge them into the weights with merge_lora(model), or save "
            "the adapters alone"
        )
    quantized = [n for n, m in model.named_modules() if isinstance(m, QuantizedLinear)]
    if quantized:
        raise AdapterError(
            f"cannot {action}: {len(quantized)} layers ({quantized[0]}, ...) hold NF4 "
            "weights; dequantize them with dequantize_model(model) first"
        )
    from riftco.nn.inference_weights import BlockLinear

    blocks = [n for n, m in model.named_modules() if isinstance(m, BlockLinear)]
    if blocks:
        raise AdapterError(
            f"cannot {action}: {len(blocks)} layers ({blocks[0]}, ...) hold inference "
            "weights (Q8_0, Q4_0 or F16); dequantize them with dequantize_for_training(model) "
            "first"
        )


__all__ = [
    "LORA_TARGETS",
    "AdapterError",
    "LoraAdapter",
    "LoraConfig",
    "LoraLanguageModelHead",
    "LoraLinear",
    "LoraQuantizedLinear",
    "adapted_modules",
    "attach_lora",
    "check_exportable",
    "detach_lora",
    "has_adapters",
    "load_lora_state_dict",
    "lora_config",
    "lora_parameters",
    "lora_state_dict",
    "merge_lora",
]
