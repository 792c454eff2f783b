"""The backend capabilities a training job needs, checked before the job starts.

The list is the model's own (riftco.nn's ``required_capabilities_for``, the one
definition training and serving share), made from the configuration before the model
is built. A job on a backend that lacks one of them stops at once with
``riftco.tensor.JobUnsupported`` naming every missing capability, rather than
failing mid-run or falling back to another backend.
"""

from __future__ import annotations

import riftco.tensor as rt
from riftco.nn import QuantizedLinear, TransformerConfig, required_capabilities_for
from riftco.nn.capabilities import CONTIGUOUS_DECODING

#: Incremental decoding over riftco-nn's contiguous cache (the sample after training):
#: what the ``generate`` job adds to the forward that training already checked.
DECODING = CONTIGUOUS_DECODING
#: QLoRA's frozen base: NF4 linears forward and backward, dequantized when merged.
NF4 = QuantizedLinear.layer_capabilities("qlora")

#: Training methods and the riftco.nn job each one is.
_JOBS = {"full": "train", "lora": "lora", "qlora": "qlora"}


def training_capabilities(config: TransformerConfig, method: str = "full") -> tuple[str, ...]:
    """What one training step (forward, loss, backward, Adam) of ``config`` needs, with
    ``method`` ``full``, ``lora`` or ``qlora``, in CAPABILITIES order."""
    if method not in _JOBS:
        raise ValueError(f"method must be one of {', '.join(_JOBS)}, found {method!r}")
    return required_capabilities_for(config, _JOBS[method])


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
