"""The adapter methods of post-training: ``full`` fine-tuning, ``lora`` and ``qlora``.

- ``lora``: adapters on the targeted layers of the float32 base; only they train.
- ``qlora``: every ``Linear`` of the base is quantized to NF4 first (riftco-nn's
  ``QuantizedLinear``), then adapters are attached; Adam's moments are paged by default.

Checkpoints of a QLoRA run hold the packed NF4 payload of every quantized layer as
tensors ``nf4.<layer>.<part>`` (``codes`` and, double-quantized, ``absmax`` uint8;
``group_range`` and ``offset`` float32; plain scales are float32 ``absmax``), and the
run description holds the payload's manifest (each layer's shape, block size and
identity, and one identity over all of them), so a resume rebuilds the same quantized
model without the base bundle and refuses a payload that does not match.

At the end the adapters are merged (a quantized base is dequantized first) into a
plain float32 model, which becomes the child bundle; ``save_adapters`` keeps the
adapters alone as a small safetensors file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from riftco.core import canonical_hash, loads_strict
from riftco.interchange import (
    ContainerError,
    canonical_json,
    read_safetensors,
    write_safetensors,
)
from riftco.nn import (
    LoraConfig,
    QuantizedLinear,
    attach_lora,
    check_exportable,
    dequantize_model,
    has_adapters,
    load_lora_state_dict,
    lora_parameters,
    lora_state_dict,
    merge_lora,
    quantize_model,
    weight_memory,
)
from riftco.nn.lora import lora_config
from riftco.tensor import NF4Weight
from riftco.tensor.ops.quantized import NF4_BLOCK_SIZES
from riftco.train.errors import CheckpointError, ResumeMismatch

METHODS = ("full", "lora", "qlora")
#: Prefix of the packed NF4 tensors in a checkpoint.
PACKED_PREFIX = "nf4."
ADAPTERS_FORMAT = "riftco-train/adapters"
ADAPTERS_KEY = "riftco.adapters"


@dataclass(frozen=True)
class AdapterOptions:
    """How post-training adapts the base: the method, LoRA's rank, alpha, targets and
    seed, the NF4 block size and double quantization (QLoRA), and whether Adam's
    moments are paged (None: for QLoRA only)."""

    method: str = "full"
    lora_rank: int = 4
    lora_alpha: float = 8.0
    lora_targets: tuple[str, ...] = ("attention.query", "attention.value")
    lora_seed: int = 0
    nf4_block_size: int = 64
    nf4_double_quant: bool = True
    paged_moments: bool | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; found {self.method!r}")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        if self.method != "full":
            self.lora_config()  # validates rank, alpha and targets
        if self.nf4_block_size not in NF4_BLOCK_SIZES:
            raise ValueError(
                f"nf4_block_size must be a power of two from 32 to 4096; found {self.nf4_block_size!r}"
            )

    def lora_config(self) -> LoraConfig:
        return LoraConfig(self.lora_rank, self.lora_alpha, self.lora_targets, self.lora_seed)

    @property
    def paged(self) -> bool:
        return self.method == "qlora" if self.paged_moments is None else bool(self.paged_moments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "lora_rank": self.lora_rank,
            "lora_alpha": self.lora_alpha,
            "lora_targets": list(self.lora_targets),
            "lora_seed": self.lora_seed,
            "nf4_block_size": self.nf4_block_size,
            "nf4_double_quant": self.nf4_double_quant,
            "paged_moments": self.paged_moments,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AdapterOptions:
        return cls(**{**data, "lora_targets": tuple(data.get("lora_targets", cls.lora_targets))})


# -- preparing and exporting the model ----------------------------------------------
def prepare_model(
    model: Any, options: AdapterOptions, packed: Mapping[str, NF4Weight] | None = None
) -> list[str]:
    """Quantize (QLoRA) and attach adapters (LoRA, QLoRA); returns the adapted layers.
    ``packed`` (from a checkpoint) replaces quantizing the model's own weights."""
    if options.method == "full":
        return []
    if options.method == "qlora":
        if packed is None:
            quantize_model(model, options.nf4_block_size, options.nf4_double_quant)
        else:
            install_packed(model, packed)
    return attach_lora(model, options.lora_config())


def export_model(model: Any) -> None:
    """Merge the adapters and dequantize, leaving a plain float32 model."""
    if has_adapters(model):
        merge_lora(model)
    dequantize_model(model)
    check_exportable(model)


def install_packed(model: Any, packed: Mapping[str, NF4Weight]) -> None:
    """Replace exactly the linears ``packed`` names by quantized layers holding those
    payloads (sharing and freezing each linear's bias)."""
    from riftco.nn import Linear

    modules = dict(model.named_modules())
    linears = {n for n, m in modules.items() if type(m) is Linear}
    if set(packed) != linears:
        raise ResumeMismatch(
            f"the checkpoint's NF4 layers do not fit the model: missing "
            f"{sorted(linears - set(packed))[:3]}, unexpected {sorted(set(packed) - linears)[:3]}"
        )
    made = {}
    for name, weight in packed.items():
        linear = modules[name]
        if weight.shape != tuple(linear.weight.shape):
            raise ResumeMismatch(
                f"the checkpoint's NF4 weight {name!r} is {list(weight.shape)}; the model "
                f"expects {list(linear.weight.shape)}"
            )
        q = QuantizedLinear(weight.to(linear.weight.value.backend), linear.bias)
        q.weight_requires_grad = linear.weight.requires_grad
        made[name] = q
    for name, q in made.items():
        if q.bias is not None:
            q.bias.requires_grad = False
        model.replace_child(name, q)


# -- the packed payload in checkpoints --------------------------------------------------
def _layers(model: Any) -> dict[str, QuantizedLinear]:
    named = getattr(model, "named_modules", None)  # the engine takes any language model
    if not callable(named):
        return {}
    return {n: m for n, m in named() if isinstance(m, QuantizedLinear)}


def packed_tensors(model: Any) -> dict[str, np.ndarray]:
    """``nf4.<layer>.<part>`` arrays of every quantized layer (empty for other models)."""
    out = {}
    for name, layer in _layers(model).items():
        for part, array in layer.weight.arrays().items():
            out[f"{PACKED_PREFIX}{name}.{part}"] = array
    return out


def packed_manifest(model: Any) -> dict[str, Any] | None:
    """Each quantized layer's metadata and identity, and one identity over all of them
    (None for a model without quantized layers)."""
    layers = {
        name: {**layer.weight.metadata(), "identity": layer.weight.identity}
        for name, layer in sorted(_layers(model).items())
    }
    if not layers:
        return None
    return {"identity": canonical_hash(layers), "layers": layers}


def read_packed(
    tensors: Mapping[str, np.ndarray], manifest: Mapping[str, Any]
) -> dict[str, NF4Weight]:
    """The packed weights a checkpoint holds, checked against ``manifest`` (each layer's
    identity and the overall one); ``CheckpointError`` names what differs."""
    try:
        layers = manifest["layers"]
        grouped: dict[str, dict[str, np.ndarray]] = {name: {} for name in layers}
        for key, array in tensors.items():
            if key.startswith(PACKED_PREFIX):
                name, _, part = key[len(PACKED_PREFIX) :].rpartition(".")
                if name not in grouped:
                    raise CheckpointError(f"{key}: a packed tensor of no listed layer")
                grouped[name][part] = np.asarray(array)
        out = {}
        for name, meta in layers.items():
            if meta.get("format") != "nf4":
                raise CheckpointError(
                    f"{name}: expected format 'nf4'; found {meta.get('format')!r}"
                )
            w = NF4Weight.from_arrays(grouped[name], tuple(meta["shape"]), meta["block_size"])
            if w.double_quant != meta["double_quant"] or w.identity != meta["identity"]:
                raise CheckpointError(
                    f"{name}: the packed NF4 weight hashes to {w.identity[:16]}...; the "
                    f"checkpoint records {str(meta['identity'])[:16]}..."
                )
            out[name] = w
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"the packed NF4 payload does not fit its manifest: {exc}") from None
    listed = {n: {**w.metadata(), "identity": w.identity} for n, w in sorted(out.items())}
    if canonical_hash(listed) != manifest.get("identity"):
        raise CheckpointError("the packed NF4 payload's identity differs from the checkpoint's")
    return out


# -- summaries and small adapter files ------------------------------------------------------
def adapter_summary(model: Any, options: AdapterOptions) -> dict[str, Any]:
    """What the method did to the model, for the run's summary (empty for ``full``)."""
    if options.method == "full":
        return {}
    memory = weight_memory(model)
    summary: dict[str, Any] = {
        "method": options.method,
        "lora": options.lora_config().to_dict(),
        "trainable_parameters": sum(p.size for _, p in lora_parameters(model)),
    }
    if options.method == "qlora":
        summary["nf4"] = {
            "block_size": options.nf4_block_size,
            "double_quant": options.nf4_double_quant,
            "linear_weights": memory.elements,
            "float32_bytes": memory.float32_bytes,
            "stored_bytes": memory.stored_bytes,
        }
    return summary


def save_adapters(
    path: str | os.PathLike[str], model: Any, metadata: Mapping[str, Any] | None = None
) -> None:
    """Write the attached adapters alone (float32, by qualified name) with their LoRA
    configuration, atomically, as a safetensors file."""
    arrays = {n: np.array(t.numpy(), dtype=np.float32) for n, t in lora_state_dict(model).items()}
    config = lora_config(model)
    document = {
        "format": ADAPTERS_FORMAT,
        "format_version": 1,
        "lora": config.to_dict() if config else None,
        "metadata": dict(metadata or {}),
    }
    write_safetensors(path, arrays, {ADAPTERS_KEY: canonical_json(document).decode("utf-8")})


def load_adapters(path: str | os.PathLike[str], model: Any) -> dict[str, Any]:
    """Attach adapters saved by ``save_adapters`` to ``model`` (with their configuration,
    unless the model already has matching ones) and load their values; returns the
    file's description."""
    try:
        stored = read_safetensors(path)
        document = loads_strict(stored.metadata[ADAPTERS_KEY])
    except (ContainerError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a riftco adapters file ({exc})") from None
    if document.get("format") != ADAPTERS_FORMAT or document.get("format_version") != 1:
        raise CheckpointError(f"{path}: expected format {ADAPTERS_FORMAT!r} version 1")
    config = LoraConfig.from_dict(document["lora"])
    if not has_adapters(model):
        attach_lora(model, config)
    elif lora_config(model) != config:
        raise ResumeMismatch(f"{path}: adapters of {config}; the model has {lora_config(model)}")
    load_lora_state_dict(model, stored.arrays(copy=True))
    return document


__all__ = [
    "ADAPTERS_FORMAT",
    "METHODS",
    "PACKED_PREFIX",
    "AdapterOptions",
    "adapter_summary",
    "export_model",
    "install_packed",
    "load_adapters",
    "packed_manifest",
    "packed_tensors",
    "prepare_model",
    "read_packed",
    "save_adapters",
]
