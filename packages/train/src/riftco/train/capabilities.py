"""The backend capabilities a training job needs, checked before the job starts.

A job on a backend that lacks one of them stops at once with
``riftco.tensor.JobUnsupported`` naming every missing capability, rather than
failing mid-run or falling back to another backend.
"""

from __future__ import annotations

import riftco.tensor as rt
from riftco.nn import TransformerConfig

#: Incremental decoding over riftco-nn's contiguous cache (the sample after training).
DECODING = ("attention_varlen", "write_rows")
#: QLoRA's frozen base: NF4 linears forward and backward, dequantized when merged.
NF4 = ("nf4_dequantize", "nf4_linear", "nf4_linear_backward")


def training_capabilities(config: TransformerConfig, method: str = "full") -> tuple[str, ...]:
    """What one training step (forward, loss, backward, Adam) of ``config`` needs, with
    ``method`` ``full``, ``lora`` or ``qlora``, in CAPABILITIES order."""
    needs = {
        *rt.BASE_CAPABILITIES,
        "activation_backward",
        "cross_entropy",
        "cross_entropy_backward",
        "adam_update",
    }
    norm = "layer_norm" if config.norm == "layer" else "rms_norm"
    attention = "flash_attention" if config.attention == "flash" else "attention"
    needs |= {norm, f"{norm}_backward", attention, f"{attention}_backward"}
    if config.positions == "rotary":
        needs.add("rotary")
    if method == "qlora":
        needs.update(NF4)
    return tuple(name for name in rt.CAPABILITIES if name in needs)


def require_training_backend(
    config: TransformerConfig, method: str = "full", *, job: str, precision: str = "f32"
) -> rt.Backend:
    """The default backend (RIFTCO_BACKEND or auto), once it has every capability that
    training ``config`` with ``method`` needs, and holds bfloat16 tensors for
    ``precision`` ``bf16``; ``JobUnsupported`` otherwise."""
    backend = rt.require_capabilities(None, training_capabilities(config, method), job=job)
    if precision == "bf16" and rt.bfloat16 not in backend.dtypes:
        raise rt.JobUnsupported(
            f"{job} with --precision bf16 needs bfloat16 tensors, which backend "
            f"{backend.name!r} does not hold (it holds "
            f"{', '.join(d.value for d in rt.DType if d in backend.dtypes)}); "
            "train with --precision f32 there",
            backend=backend.name,
            job=job,
            missing=(),
        )
    return backend


__all__ = ["DECODING", "NF4", "require_training_backend", "training_capabilities"]
