"""The op vocabularies: every op the ``unary``, ``binary``, ``compare``, ``reduce`` and
``activation_backward`` capabilities take, by name, with its numpy reference formula.

A backend looks a kernel up by the op's NAME in these tables (never by its position in a
list), the numpy reference backend (riftco-testing) computes with these formulas, and a
test checks each backend's kernel table against them. The formulas are plain numpy on
whatever array they are given: the reference backend widens float32 to float64 first
and rounds the result once, as the interface asks of every backend.

Which dtypes an op takes (``Backend.unary`` and friends say so too): float32 and
bfloat16 for every op of a table, except that int64 has ``INTEGER_UNARY``,
``INTEGER_BINARY`` and ``INTEGER_REDUCTIONS``, bool has ``BOOL_UNARY`` only, every dtype
compares with the ``ORDERINGS`` and only bool with ``BOOL_COMPARISONS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

#: A numpy formula: arrays (and, for a reduction, the axis) in, an array or scalar out.
Formula = Callable[..., Any]

_ERF = np.vectorize(math.erf, otypes=[np.float64])
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBIC = 0.044715


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + _GELU_TANH_CUBIC * x**3)))


#: ``unary(op, x)``: one array in, one array out.
UNARY: Mapping[str, Formula] = MappingProxyType(
    {
        "neg": lambda x: -x,
        "abs": np.abs,
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "rsqrt": lambda x: 1.0 / np.sqrt(x),
        "tanh": np.tanh,
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
        "relu": lambda x: np.maximum(x, 0),
        "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
        "gelu_tanh": _gelu_tanh,
        "silu": lambda x: x / (1.0 + np.exp(-x)),
        "logical_not": np.logical_not,
    }
)

#: ``binary(op, a, b)`` with numpy broadcasting.
BINARY: Mapping[str, Formula] = MappingProxyType(
    {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "pow": np.power,
        "maximum": np.maximum,
        "minimum": np.minimum,
    }
)

#: ``compare(op, a, b)`` with numpy broadcasting; the result is bool.
COMPARISONS: Mapping[str, Formula] = MappingProxyType(
    {
        "eq": np.equal,
        "ne": np.not_equal,
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
        "logical_and": np.logical_and,
        "logical_or": np.logical_or,
    }
)

#: ``reduce(op, x, axis)``: the axis is removed.
REDUCTIONS: Mapping[str, Formula] = MappingProxyType(
    {
        "sum": lambda x, axis: np.sum(x, axis=axis),
        "mean": lambda x, axis: np.mean(x, axis=axis),
        "max": lambda x, axis: np.max(x, axis=axis),
        "min": lambda x, axis: np.min(x, axis=axis),
        "sum_squares": lambda x, axis: np.sum(x * x, axis=axis),
    }
)


def _gelu_grad(x: np.ndarray) -> np.ndarray:
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return 0.5 * (1.0 + _ERF(x / math.sqrt(2.0))) + x * pdf


def _gelu_tanh_grad(x: np.ndarray) -> np.ndarray:
    c = _SQRT_2_OVER_PI
    t = np.tanh(c * (x + _GELU_TANH_CUBIC * x**3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * _GELU_TANH_CUBIC * x * x)


def _silu_grad(x: np.ndarray) -> np.ndarray:
    sig = 1.0 / (1.0 + np.exp(-x))
    return sig * (1.0 + x * (1.0 - sig))


#: ``activation_backward(op, x, dy)``: the derivative ``op'(x)`` that multiplies ``dy``.
ACTIVATION_GRADIENTS: Mapping[str, Formula] = MappingProxyType(
    {"gelu": _gelu_grad, "gelu_tanh": _gelu_tanh_grad, "silu": _silu_grad}
)

#: The unary ops int64 has, and the one bool has.
INTEGER_UNARY: frozenset[str] = frozenset({"neg", "abs"})
BOOL_UNARY: frozenset[str] = frozenset({"logical_not"})
#: The unary ops of float32 and bfloat16 (every one but ``logical_not``).
FLOAT_UNARY: frozenset[str] = frozenset(UNARY) - BOOL_UNARY
#: The binary ops int64 has (every one but ``div`` and ``pow``).
INTEGER_BINARY: frozenset[str] = frozenset(BINARY) - {"div", "pow"}
#: The comparisons of bool operands only (``logical_and``, ``logical_or``), and the rest.
BOOL_COMPARISONS: frozenset[str] = frozenset({"logical_and", "logical_or"})
ORDERINGS: frozenset[str] = frozenset(COMPARISONS) - BOOL_COMPARISONS
#: The reductions int64 has.
INTEGER_REDUCTIONS: frozenset[str] = frozenset({"sum", "max", "min"})

#: Capability -> its vocabulary: the ops a backend's kernel table for it must name.
VOCABULARIES: Mapping[str, Mapping[str, Formula]] = MappingProxyType(
    {
        "unary": UNARY,
        "binary": BINARY,
        "compare": COMPARISONS,
        "reduce": REDUCTIONS,
        "activation_backward": ACTIVATION_GRADIENTS,
    }
)


def check_kernel_table(capability: str, names: object, *, subset: bool = False) -> None:
    """Raise ``ValueError`` unless ``names`` (a backend's kernel table for ``capability``:
    a mapping or a collection of op names) names exactly the ops of its vocabulary; with
    ``subset``, at most those (a table of one dtype's kernels). The message lists what is
    missing and what is unknown."""
    vocabulary = VOCABULARIES[capability]
    given = set(names)  # type: ignore[call-overload]
    unknown = sorted(given - set(vocabulary))
    missing = [] if subset else sorted(set(vocabulary) - given)
    if unknown or missing:
        raise ValueError(
            f"{capability}: the kernel table names {sorted(given)}; "
            f"missing {missing or 'nothing'}, not in the vocabulary {unknown or 'nothing'}"
        )


__all__ = [
    "ACTIVATION_GRADIENTS",
    "BINARY",
    "BOOL_COMPARISONS",
    "BOOL_UNARY",
    "COMPARISONS",
    "FLOAT_UNARY",
    "INTEGER_BINARY",
    "INTEGER_REDUCTIONS",
    "INTEGER_UNARY",
    "ORDERINGS",
    "REDUCTIONS",
    "UNARY",
    "VOCABULARIES",
    "Formula",
    "check_kernel_table",
]
