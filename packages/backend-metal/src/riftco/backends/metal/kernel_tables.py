"""Which op of each capability has a kernel here, by name and element type: the tables
``elementwise``, ``reductions`` and ``fused`` look an op's WGSL up in. A test checks
them against riftco.tensor's vocabularies (``riftco.tensor.plugin.VOCABULARIES``)."""

from __future__ import annotations

from collections.abc import Mapping

from riftco.backends.metal import elementwise, fused, reductions
from riftco.tensor.plugin import DType

#: capability -> element type -> the op names it has kernels for.
KERNEL_TABLES: Mapping[str, Mapping[DType, frozenset[str]]] = {
    "unary": {
        DType.float32: frozenset(elementwise.UNARY_F32),
        DType.int64: frozenset(elementwise.UNARY_INT),
        DType.bool: frozenset(elementwise.UNARY_BOOL),
    },
    "binary": {
        DType.float32: frozenset(elementwise.BINARY_F32),
        DType.int64: frozenset(elementwise.BINARY_INT),
    },
    "compare": {dtype: frozenset(elementwise.COMPARISONS) for dtype in elementwise.WGSL_TYPE},
    "reduce": {
        DType.float32: frozenset(reductions.CODES) - {"argmax"},
        DType.int64: frozenset({"sum", "max", "min"}),
    },
    "activation_backward": {DType.float32: frozenset(fused.DERIVATIVES)},
}


def names(capability: str) -> frozenset[str]:
    """Every op of ``capability`` with a kernel for some element type."""
    return frozenset().union(*KERNEL_TABLES[capability].values())


__all__ = ["KERNEL_TABLES", "names"]
