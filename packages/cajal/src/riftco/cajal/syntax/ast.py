"""The expression tree of Cajal-lite: immutable nodes compared by structure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from riftco.cajal.errors import InvalidNameError, MalformedExpressionError
from riftco.cajal.types import DictionaryType, SumType
from riftco.cajal.values import (
    DictionaryValue,
    LeftValue,
    PairValue,
    RightValue,
    UnitValue,
    Value,
)

KEYWORDS = frozenset(
    {"let", "in", "case", "of", "inl", "inr", "fst", "snd", "dict", "Unit", "Bool", "Dict"}
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_']*")


def _check_name(name: object, role: str) -> None:
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name) or name in KEYWORDS:
        raise InvalidNameError(
            f"{role}: expected an identifier ([A-Za-z_][A-Za-z0-9_']*, not a keyword), "
            f"found {name!r}"
        )


@dataclass(frozen=True)
class Variable:
    """A use of a variable of the context or of a let or case binder."""

    name: str

    def __post_init__(self) -> None:
        _check_name(self.name, "variable")


@dataclass(frozen=True)
class Unit:
    """``()``, the value of Unit; uses no variable."""


@dataclass(frozen=True)
class Tuple:
    """``(first, second)``: an additive pair; both parts use the whole context."""

    first: Expression
    second: Expression


@dataclass(frozen=True)
class InjectLeft:
    """``inl[A + B] body``: the left injection into the sum type ``type``."""

    body: Expression
    type: SumType


@dataclass(frozen=True)
class InjectRight:
    """``inr[A + B] body``: the right injection into the sum type ``type``."""

    body: Expression
    type: SumType


@dataclass(frozen=True)
class Dictionary:
    """``dict[K, V] {k1: v1, ...}``: entries share the context; in each entry the key and
    the value split it."""

    type: DictionaryType
    entries: tuple[tuple[Expression, Expression], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple((k, v) for k, v in self.entries))


@dataclass(frozen=True)
class Sequence:
    """``first; second``: ``first`` has type Unit; the two parts split the context."""

    first: Expression
    second: Expression


@dataclass(frozen=True)
class Projection:
    """``fst body`` (index 0) or ``snd body`` (index 1) of an additive pair."""

    body: Expression
    index: int

    def __post_init__(self) -> None:
        if self.index not in (0, 1):
            raise MalformedExpressionError(
                f"projection: expected index 0 or 1, found {self.index!r}"
            )


@dataclass(frozen=True)
class Case:
    """``case scrutinee of inl x => left_body | inr y => right_body``."""

    scrutinee: Expression
    left_name: str
    left_body: Expression
    right_name: str
    right_body: Expression

    def __post_init__(self) -> None:
        _check_name(self.left_name, "case binder")
        _check_name(self.right_name, "case binder")


@dataclass(frozen=True)
class Let:
    """``let name = bound in body``."""

    name: str
    bound: Expression
    body: Expression

    def __post_init__(self) -> None:
        _check_name(self.name, "let binder")


@dataclass(frozen=True)
class Lookup:
    """``dictionary[key]``: the value under the one entry whose key equals ``key``."""

    dictionary: Expression
    key: Expression


Expression = (
    Variable
    | Unit
    | Tuple
    | InjectLeft
    | InjectRight
    | Dictionary
    | Sequence
    | Projection
    | Case
    | Let
    | Lookup
)


def free_variables(expression: Expression) -> frozenset[str]:
    """The names ``expression`` uses and does not bind itself."""
    match expression:
        case Variable(name):
            return frozenset((name,))
        case Unit():
            return frozenset()
        case Tuple(first, second) | Sequence(first, second) | Lookup(first, second):
            return free_variables(first) | free_variables(second)
        case InjectLeft(body, _) | InjectRight(body, _) | Projection(body, _):
            return free_variables(body)
        case Dictionary(_, entries):
            names: frozenset[str] = frozenset()
            for key, value in entries:
                names |= free_variables(key) | free_variables(value)
            return names
        case Case(scrutinee, left_name, left_body, right_name, right_body):
            return (
                free_variables(scrutinee)
                | (free_variables(left_body) - {left_name})
                | (free_variables(right_body) - {right_name})
            )
        case Let(name, bound, body):
            return free_variables(bound) | (free_variables(body) - {name})
    raise MalformedExpressionError(f"expected an expression, found {type(expression).__name__}")


def literal(value: Value) -> Expression:
    """A closed expression that evaluates to ``value``."""
    match value:
        case UnitValue():
            return Unit()
        case LeftValue(payload, sum_type):
            return InjectLeft(literal(payload), sum_type)
        case RightValue(payload, sum_type):
            return InjectRight(literal(payload), sum_type)
        case PairValue(first, second):
            return Tuple(literal(first), literal(second))
        case DictionaryValue(dictionary_type, entries):
            return Dictionary(dictionary_type, tuple((literal(k), literal(v)) for k, v in entries))
    raise MalformedExpressionError(f"expected a value, found {type(value).__name__}")
