"""The backend capabilities a job on a model needs: the one list training and serving
check before they start (``riftco.tensor.require_capabilities``).

The list comes from the model itself: its configuration picks the norm, the attention
kernel and rotary positions, and a layer that calls kernels of its own (NF4 or
block-layout weights) declares them through ``Module.layer_capabilities``. It can also
be made from a configuration alone, before any model exists
(``required_capabilities_for``), so a job refuses a backend before reading its data.

Jobs: ``train`` (full training: forward, loss, backward, Adam), ``lora`` (the same
kernels: the frozen base is float32), ``qlora`` (an NF4 base besides), ``generate``
(in-process incremental decoding, prefill included; listed with the contiguous cache's
kernels, which ``generate`` falls back to on a backend without ``paged_attention``)
and ``serve`` (decoding over the paged cache, prefill included). The
whole-step decoder (``decode_step``) is never required: a backend without it decodes
op by op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import riftco.tensor as rt
from riftco.nn.config import TransformerConfig
from riftco.nn.errors import ConfigError
from riftco.nn.jobs import JOBS, TRAINING_JOBS

if TYPE_CHECKING:
    from riftco.nn.module import Module


#: What a training step adds to the forward: the loss and its gradient, the
#: activations' gradient and the optimizer's update.
TRAINING = ("activation_backward", "cross_entropy", "cross_entropy_backward", "adam_update")
#: Incremental decoding over the contiguous cache: keys and values written in place,
#: each sequence's queries attending over its own rows.
CONTIGUOUS_DECODING = ("attention_varlen", "write_rows")
#: Incremental decoding over the paged cache.
PAGED_DECODING = ("write_rows", "paged_attention")

#: What ``weights`` may name: float32 (None), NF4, or a block layout (riftco.nn's
#: ``INFERENCE_FORMATS``).
WEIGHT_FORMATS = ("float32", "nf4", "f16", "q8_0", "q4_0")


def _check_job(job: object) -> str:
    if job not in JOBS:
        raise ConfigError(f"required capabilities: job must be one of {JOBS}, found {job!r}")
    return str(job)


def _weight_layer(weights: str | None) -> type[Module] | None:
    """The layer class that holds the linear weights in format ``weights``."""
    if weights in (None, "float32"):
        return None
    if weights == "nf4":
        from riftco.nn.quantized import QuantizedLinear

        return QuantizedLinear
    from riftco.nn.inference_weights import INFERENCE_FORMATS, BlockLinear

    if weights in INFERENCE_FORMATS:
        return BlockLinear
    raise ConfigError(
        f"required capabilities: weights must be one of {WEIGHT_FORMATS} (or None), "
        f"found {weights!r}"
    )


def _config_needs(config: TransformerConfig, job: str) -> set[str]:
    norm = "layer_norm" if config.norm == "layer" else "rms_norm"
    needs = {*rt.BASE_CAPABILITIES, norm}
    if config.positions == "rotary":
        needs.add("rotary")
    if job in TRAINING_JOBS:
        attention = "flash_attention" if config.attention == "flash" else "attention"
        needs |= {f"{norm}_backward", attention, f"{attention}_backward", *TRAINING}
    elif job == "generate":
        needs.update(CONTIGUOUS_DECODING)
    else:
        needs.update(PAGED_DECODING)
    return needs


def _in_table_order(needs: set[str]) -> tuple[str, ...]:
    return tuple(name for name in rt.CAPABILITIES if name in needs)


def required_capabilities_for(
    config: TransformerConfig, job: str, *, weights: str | None = None
) -> tuple[str, ...]:
    """What ``job`` on a model of ``config`` needs, in CAPABILITIES order, before the
    model is built. ``weights`` is the format its linear layers will hold (``nf4``, or
    a block layout ``f16`` / ``q8_0`` / ``q4_0``; None or ``float32``: plain float32);
    ``qlora`` implies ``nf4``. ``ConfigError`` for an unknown job or format."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(
            f"required_capabilities_for: expected a TransformerConfig, found "
            f"{type(config).__name__}"
        )
    job = _check_job(job)
    needs = _config_needs(config, job)
    layer = _weight_layer("nf4" if job == "qlora" and weights is None else weights)
    if layer is not None:
        needs.update(layer.layer_capabilities(job))
    return _in_table_order(needs)


def model_capabilities(model: Module, job: str) -> tuple[str, ...]:
    """What ``job`` on ``model`` (a module with a ``config``, such as
    ``DecoderOnlyTransformer``) needs, in CAPABILITIES order: its configuration's list
    and whatever the layers it holds now declare."""
    config = getattr(model, "config", None)
    if not isinstance(config, TransformerConfig):
        raise TypeError(
            f"model_capabilities: expected a model with a TransformerConfig, found "
            f"{type(model).__name__}"
        )
    needs = set(required_capabilities_for(config, job))
    for m in model.modules():
        needs.update(m.layer_capabilities(job))
    return _in_table_order(needs)


__all__ = [
    "CONTIGUOUS_DECODING",
    "JOBS",
    "PAGED_DECODING",
    "TRAINING",
    "TRAINING_JOBS",
    "WEIGHT_FORMATS",
    "model_capabilities",
    "required_capabilities_for",
]
