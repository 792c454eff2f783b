"""riftco.cajal.lowering: multilinear maps as differentiable riftco-nn modules.

Needs the extra ``lowering`` (riftco-nn). The analysis it acts on is
``riftco.cajal.plan`` (standard library only).

    >>> from riftco.cajal import compile_program, parse, parse_context
    >>> from riftco.cajal.lowering import lower
    >>> program = compile_program(parse("d[k]"), parse_context("d: Dict[Bool, Bool], k: Bool"))
    >>> module = lower(program)              # auto: a bilinear linear attention, frozen
    >>> module.strategy
    'linear_attention'
"""

from __future__ import annotations

from riftco.cajal.lowering import _requires  # noqa: F401  (a clear error without the extra)
from riftco.cajal.lowering.lower import INITS, build, lower
from riftco.cajal.lowering.modules import (
    MODULES,
    DenseProgram,
    LinearAttentionProgram,
    LinearProgram,
    LoweredProgram,
)
from riftco.cajal.plan import (
    DEFAULT_MAX_COEFFICIENTS,
    REFUSED,
    STRATEGIES,
    LoweringPlan,
    analyze,
)

__all__ = [
    "DEFAULT_MAX_COEFFICIENTS",
    "INITS",
    "MODULES",
    "REFUSED",
    "STRATEGIES",
    "DenseProgram",
    "LinearAttentionProgram",
    "LinearProgram",
    "LoweredProgram",
    "LoweringPlan",
    "analyze",
    "build",
    "lower",
]
