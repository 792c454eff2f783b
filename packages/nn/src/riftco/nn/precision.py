"""Mixed precision: which dtype matrix products and attention read their operands in.

Inside ``mixed_precision("bfloat16")`` the fused functions of ``riftco.nn.functional``
(``linear``, ``projected_attention``, ``attention``) round their operands to bfloat16
and multiply with float32 accumulation, giving float32 results and float32 gradients.
Everything else stays float32: parameters (the master weights), activations between
products, normalization, softmax statistics, the loss and every gradient. The choice
is made when a node is recorded, so its backward runs in the same precision wherever
``backward()`` is called. Outside the context (the default) nothing is rounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import riftco.tensor as rt

#: The names ``--precision`` takes, and the compute dtype each one means
#: (None: float32 throughout).
PRECISIONS: dict[str, rt.DType | None] = {"f32": None, "bf16": rt.bfloat16}

_COMPUTE: ContextVar[rt.DType | None] = ContextVar("riftco_nn_compute_dtype", default=None)


def compute_dtype() -> rt.DType | None:
    """The dtype products read their operands in here; None for float32 (no rounding)."""
    return _COMPUTE.get()


@contextmanager
def mixed_precision(dtype: rt.DType | str | None) -> Iterator[None]:
    """Run matrix products and attention with operands in ``dtype`` (``"bfloat16"``,
    or ``"bf16"``); ``None``, ``"f32"`` or ``"float32"`` keep float32 throughout."""
    if isinstance(dtype, str) and dtype in PRECISIONS:
        chosen = PRECISIONS[dtype]
    elif dtype is None:
        chosen = None
    else:
        as_type = rt.as_dtype(dtype)
        if as_type not in (rt.float32, rt.bfloat16):
            raise ValueError(
                f"mixed_precision: expected bfloat16 or float32, found {as_type.value}"
            )
        chosen = None if as_type is rt.float32 else as_type
    token = _COMPUTE.set(chosen)
    try:
        yield
    finally:
        _COMPUTE.reset(token)


__all__ = ["PRECISIONS", "compute_dtype", "mixed_precision"]
