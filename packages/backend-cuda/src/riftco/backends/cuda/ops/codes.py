"""Op codes by name, read from the kernels themselves.

A kernel that runs several ops takes the op as an integer code, and its CUDA C source
names every code in an enum (``enum UnaryOp { UNARY_NEG = 0, ... UNARY_GELU_TANH = 10 }``
in ``driver/kernels/elementwise.cu``). This module reads those enums from the sources compiled
into the native module, so a launch passes ``UNARY[op]``, the code the kernel gives
the op's name: no list order, here or in riftco.tensor's vocabulary, decides which
kernel runs, and a test checks every table against the vocabulary by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from riftco.backends.cuda import _native
from riftco.backends.cuda.errors import CudaError

_ENUM = re.compile(r"\benum\s+(\w+)\s*\{([^}]*)\}", re.S)
_ENTRY = re.compile(r"^\s*(\w+)\s*=\s*(\d+)\s*$")


def enum_codes(source: str, enum: str, prefix: str) -> dict[str, int]:
    """``name -> code`` of ``enum <enum> { <PREFIX><NAME> = <code>, ... }`` in ``source``,
    the names lowercased without the prefix (``UNARY_GELU_TANH`` -> ``gelu_tanh``)."""
    found = {name: body for name, body in _ENUM.findall(source)}
    if enum not in found:
        raise CudaError(f"the kernel source defines no enum {enum}")
    codes: dict[str, int] = {}
    for entry in filter(str.strip, found[enum].split(",")):
        match = _ENTRY.match(entry)
        if match is None or not match.group(1).startswith(prefix):
            raise CudaError(
                f"enum {enum}: expected {prefix}<NAME> = <code>, found {entry.strip()!r}"
            )
        codes[match.group(1)[len(prefix) :].lower()] = int(match.group(2))
    if len(set(codes.values())) != len(codes):
        raise CudaError(f"enum {enum} gives two ops one code: {codes}")
    return codes


def _table(module: str, enum: str, prefix: str) -> Mapping[str, int]:
    return MappingProxyType(enum_codes(_native.program_text(module), enum, prefix))


#: ``unary_f32`` / ``unary_bf16`` / ``unary_i64`` (int64: neg and abs).
UNARY: Mapping[str, int] = _table("elementwise", "UnaryOp", "UNARY_")
#: ``binary_f32`` / ``binary_bf16`` / ``binary_i64`` (int64: no div, pow).
BINARY: Mapping[str, int] = _table("elementwise", "BinaryOp", "BINARY_")
#: ``compare_*``.
COMPARISONS: Mapping[str, int] = _table("elementwise", "CompareOp", "COMPARE_")
#: ``reduce_rows_f32`` / ``reduce_cols_f32`` / ``reduce_i64``.
REDUCTIONS: Mapping[str, int] = _table("reduce", "ReduceOp", "REDUCE_")
#: ``activation_backward_f32``.
ACTIVATIONS: Mapping[str, int] = _table("norm", "ActivationOp", "ACTIVATION_")

#: Each capability's table, as riftco.tensor.plugin.VOCABULARIES names them. ``unary``
#: also has ``logical_not``, a kernel of its own (``logical_not_b``).
KERNEL_TABLES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "unary": frozenset(UNARY) | {"logical_not"},
        "binary": frozenset(BINARY),
        "compare": frozenset(COMPARISONS),
        "reduce": frozenset(REDUCTIONS),
        "activation_backward": frozenset(ACTIVATIONS),
    }
)

__all__ = [
    "ACTIVATIONS",
    "BINARY",
    "COMPARISONS",
    "KERNEL_TABLES",
    "REDUCTIONS",
    "UNARY",
    "enum_codes",
]
