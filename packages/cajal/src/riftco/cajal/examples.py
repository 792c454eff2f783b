"""A representative suite of accepted programs, covering every construct.

The tests compile each one and compare it with the interpreter on every input; they
also serve as worked examples of the syntax.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from riftco.cajal.syntax.ast import Expression
from riftco.cajal.syntax.parser import parse, parse_context
from riftco.cajal.types import Type

_NOT = "case {0} of inl t => t; inr[Bool] () | inr f => f; inl[Bool] ()"
_DROP_BOOL = "(case {0} of inl t => t | inr f => f)"


@dataclass(frozen=True)
class Example:
    """A named program: its context and its source text."""

    name: str
    context_source: str
    source: str

    @cached_property
    def expression(self) -> Expression:
        return parse(self.source)

    @cached_property
    def context(self) -> tuple[tuple[str, Type], ...]:
        return parse_context(self.context_source)


EXAMPLES: tuple[Example, ...] = (
    Example("unit", "", "()"),
    Example("identity", "x: Bool", "x"),
    Example("not", "x: Bool", _NOT.format("x")),
    Example("consume-unit", "u: Unit", "u; inl[Bool] ()"),
    Example("sequence-then-variable", "u: Unit, x: Bool", "u; x"),
    Example(
        "and",
        "x: Bool, y: Bool",
        f"case x of inl a => a; {_DROP_BOOL.format('y')}; inl[Bool] () | inr b => b; y",
    ),
    Example(
        "xor",
        "x: Bool, y: Bool",
        f"case x of inl a => a; y | inr b => b; {_NOT.format('y')}",
    ),
    Example("copy-additively", "x: Bool", "(x, x)"),
    Example("swap-pair", "p: Bool & Unit", "(snd p, fst p)"),
    Example("project-nested", "p: Bool & (Unit + Bool)", "snd p"),
    Example("let-twice", "x: Bool", f"let y = {_NOT.format('x')} in (y, fst (y, y))"),
    Example(
        "rotate-three",
        "x: Unit + Bool",
        "case x of inl u => u; inr[Unit + Bool] inr[Bool] () "
        "| inr b => (case b of inl v => v; inl[Unit + Bool] () "
        "| inr w => w; inr[Unit + Bool] inl[Bool] ())",
    ),
    Example("empty-dictionary", "", "dict[Bool, Unit] {}"),
    Example(
        "constant-dictionary",
        "",
        "dict[Bool, Bool] {inl[Bool] (): inr[Bool] (), inr[Bool] (): inl[Bool] ()}",
    ),
    Example("singleton-dictionary", "k: Bool, v: Unit + Bool", "dict[Bool, Unit + Bool] {k: v}"),
    Example(
        "dictionary-shares-context",
        "x: Bool",
        f"dict[Bool, Bool] {{inl[Bool] (): x, inr[Bool] (): {_NOT.format('x')}}}",
    ),
    Example("lookup", "d: Dict[Bool, Bool], k: Bool", "d[k]"),
    Example(
        "lookup-constant-key",
        "d: Dict[Unit + Bool, Bool & Unit]",
        "fst d[inr[Unit + Bool] inl[Bool] ()]",
    ),
    Example(
        "lookup-in-literal",
        "k: Bool",
        "dict[Bool, Bool] {inl[Bool] (): inr[Bool] (), inr[Bool] (): inl[Bool] ()}[k]",
    ),
    Example(
        "case-shares-dictionary",
        "s: Bool, d: Dict[Bool, Unit & Bool]",
        "case s of inl a => a; snd d[inl[Bool] ()] | inr b => b; snd d[inr[Bool] ()]",
    ),
    Example(
        "nested-dictionary",
        "d: Dict[Bool, Dict[Bool, Unit] & Unit], i: Bool, j: Bool",
        "(fst d[i])[j]",
    ),
    Example(
        "store-then-read",
        "k: Bool, v: Bool, q: Bool",
        "let table = dict[Bool, Bool] {k: v} in table[q]",
    ),
    Example(
        "three-arguments",
        "c: Unit, a: Bool, b: Bool",
        "c; dict[Bool, Bool & Bool] {a: (b, b)}",
    ),
)


def example(name: str) -> Example:
    """The example called ``name``."""
    for candidate in EXAMPLES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no example named {name!r}; the examples are {[e.name for e in EXAMPLES]}")
