"""Values of the finite types, their runtime types, and the enumeration of every value."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from riftco.cajal.errors import InvalidValueError, TypeFormationError
from riftco.cajal.types import (
    UNIT,
    DictionaryType,
    ProductType,
    SumType,
    Type,
    UnitType,
    cardinality,
    is_one_hot,
)


@dataclass(frozen=True)
class UnitValue:
    """``()``, the one value of Unit."""

    def __str__(self) -> str:
        return format_value(self)


@dataclass(frozen=True)
class LeftValue:
    """``inl payload`` of the sum type ``type``."""

    payload: Value
    type: SumType

    def __str__(self) -> str:
        return format_value(self)


@dataclass(frozen=True)
class RightValue:
    """``inr payload`` of the sum type ``type``."""

    payload: Value
    type: SumType

    def __str__(self) -> str:
        return format_value(self)


@dataclass(frozen=True)
class PairValue:
    """A value of the additive product: both parts."""

    first: Value
    second: Value

    def __str__(self) -> str:
        return format_value(self)


@dataclass(frozen=True)
class DictionaryValue:
    """A finite map with unique keys; entries are kept sorted by key index, so equal maps
    compare equal whatever order they were given in."""

    type: DictionaryType
    entries: tuple[tuple[Value, Value], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.type, DictionaryType):
            raise InvalidValueError(f"dictionary: expected a Dictionary type, found {self.type!r}")
        indexed = {}
        for key, value in self.entries:
            _expect_type(key, self.type.key, "dictionary key")
            _expect_type(value, self.type.value, "dictionary value")
            index = key_index(key)
            if index in indexed:
                raise InvalidValueError(
                    f"dictionary of type {self.type}: expected unique keys, found key "
                    f"{format_value(key)} twice"
                )
            indexed[index] = (key, value)
        object.__setattr__(self, "entries", tuple(indexed[i] for i in sorted(indexed)))

    def get(self, key: Value) -> Value | None:
        """The value stored under ``key``, or None."""
        for stored, value in self.entries:
            if stored == key:
                return value
        return None

    def __str__(self) -> str:
        return format_value(self)


Value = UnitValue | LeftValue | RightValue | PairValue | DictionaryValue

UNIT_VALUE = UnitValue()


def type_of(value: Value) -> Type:
    """The runtime type of ``value``; raises InvalidValueError if its parts disagree."""
    match value:
        case UnitValue():
            return UNIT
        case LeftValue(payload, sum_type):
            _expect_sum(sum_type, "inl")
            _expect_type(payload, sum_type.left, "inl payload")
            return sum_type
        case RightValue(payload, sum_type):
            _expect_sum(sum_type, "inr")
            _expect_type(payload, sum_type.right, "inr payload")
            return sum_type
        case PairValue(first, second):
            try:
                return ProductType(type_of(first), type_of(second))
            except TypeFormationError as error:
                raise InvalidValueError(str(error)) from error
        case DictionaryValue(dictionary_type, _):
            return dictionary_type
    raise InvalidValueError(f"expected a value, found {type(value).__name__} {value!r}")


def _expect_sum(sum_type: object, construct: str) -> None:
    if not isinstance(sum_type, SumType):
        raise InvalidValueError(f"{construct}: expected a Sum type, found {sum_type!r}")


def _expect_type(value: Value, expected: Type, role: str) -> None:
    found = type_of(value)
    if found != expected:
        raise InvalidValueError(
            f"{role} {format_value(value)}: expected type {expected}, found {found}"
        )


def key_index(key: Value) -> int:
    """The position of a one-hot value: the index of the 1 in its encoding."""
    match key:
        case UnitValue():
            return 0
        case LeftValue(payload, _):
            return key_index(payload)
        case RightValue(payload, sum_type):
            return cardinality(sum_type.left) + key_index(payload)
    raise InvalidValueError(
        f"expected a value of a one-hot type (Unit and Sum only), found {format_value(key)}"
    )


@lru_cache(maxsize=256)
def enumerate_values(type_: Type) -> tuple[Value, ...]:
    """Every value of ``type_``, in a fixed order (inl before inr, absent entries first)."""
    match type_:
        case UnitType():
            return (UNIT_VALUE,)
        case SumType(left, right):
            lefts = tuple(LeftValue(v, type_) for v in enumerate_values(left))
            return lefts + tuple(RightValue(v, type_) for v in enumerate_values(right))
        case ProductType(first, second):
            return tuple(
                PairValue(a, b)
                for a, b in itertools.product(enumerate_values(first), enumerate_values(second))
            )
        case DictionaryType(key, value):
            assert is_one_hot(key)
            keys = enumerate_values(key)
            choices = (None, *enumerate_values(value))
            return tuple(
                DictionaryValue(type_, tuple((k, v) for k, v in zip(keys, picks) if v is not None))
                for picks in itertools.product(choices, repeat=len(keys))
            )
    raise TypeFormationError(f"expected a type, found {type_!r}")


def format_value(value: Value) -> str:
    """A short human-readable form: ``()``, ``inl ()``, ``((), inr ())``, ``{inl (): ()}``."""
    match value:
        case UnitValue():
            return "()"
        case LeftValue(payload, _):
            return f"inl {_format_operand(payload)}"
        case RightValue(payload, _):
            return f"inr {_format_operand(payload)}"
        case PairValue(first, second):
            return f"({format_value(first)}, {format_value(second)})"
        case DictionaryValue(_, entries):
            inner = ", ".join(f"{format_value(k)}: {format_value(v)}" for k, v in entries)
            return "{" + inner + "}"
    return repr(value)


def _format_operand(value: Value) -> str:
    text = format_value(value)
    return f"({text})" if isinstance(value, LeftValue | RightValue) else text
