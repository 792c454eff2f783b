"""The variants' programs, written in Cajal-lite and compiled by riftco-cajal.

A letter of an ``n``-letter alphabet is the ``n``-way sum ``Unit + ... + Unit``; a
source of length ``L`` is the additive product of ``L`` letters (dimension ``L * n``:
the concatenated one-hot letters). ``Bool`` is ``inl ()`` (no trigger) or ``inr ()``.

- F: ``f(x, c) = case c of inl => x | inr => reverse x``, bilinear, shape
  ``[L n, L n, 2]``: lowered as an identity-kernel linear attention whose query is the
  condition ``c`` and whose two slots hold the copy and the reversal of ``x``.
- P: ``reverse x``, unary, shape ``[L n, L n]``: a frozen linear map.
- T: F's shape, randomly initialized and trained with the rest of the model.
- I: no program.
"""

from __future__ import annotations

from functools import cache

from riftco.cajal import CompiledProgram, compile_program, parse, parse_context

VARIANTS = ("F", "P", "T", "I")


def letter_type(symbols: int) -> str:
    return "(" + " + ".join(["Unit"] * symbols) + ")"


def sequence_type(length: int, symbols: int) -> str:
    return " & ".join([letter_type(symbols)] * length)


def reverse_source(length: int) -> str:
    """``(x_L, (x_{L-1}, (..., x_1)))`` built from projections of ``x`` (additive, so
    every projection shares ``x``)."""

    def element(k: int) -> str:
        path = "x"
        for _ in range(k):
            path = f"(snd {path})"
        return path if k == length - 1 else f"(fst {path})"

    items = [element(k) for k in reversed(range(length))]
    out = items[-1]
    for item in reversed(items[:-1]):
        out = f"({item}, {out})"
    return out


@cache
def conditional_reverse(length: int, symbols: int) -> CompiledProgram:
    source = f"case c of inl a => a; x | inr b => b; {reverse_source(length)}"
    context = f"x: {sequence_type(length, symbols)}, c: Bool"
    return compile_program(parse(source), parse_context(context))


@cache
def reverse(length: int, symbols: int) -> CompiledProgram:
    context = f"x: {sequence_type(length, symbols)}"
    return compile_program(parse(reverse_source(length)), parse_context(context))


def program_for(variant: str, length: int, symbols: int) -> CompiledProgram | None:
    if variant in ("F", "T"):
        return conditional_reverse(length, symbols)
    if variant == "P":
        return reverse(length, symbols)
    if variant == "I":
        return None
    raise ValueError(f"variant: expected one of {list(VARIANTS)}, found {variant!r}")
