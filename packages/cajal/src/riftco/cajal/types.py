"""Immutable finite types and their dense dimensions.

Every type is finite, and every type has an injective dense encoding (see encoding.py):

- ``UnitType``: one value; dimension 1.
- ``SumType(left, right)``: a value of one side; dimension d_left + d_right.
- ``ProductType(first, second)``: the additive product (a "with" pair, both parts built
  from one context); dimension d_first + d_second.
- ``DictionaryType(key, value)``: a finite map with unique keys; dimension d_key * d_value.

Two formation rules keep encodings injective and lookup exact: a dictionary key type is
one-hot (built from Unit and Sum alone, so every key encodes to a standard basis
vector), and no value of a dictionary's value type, and of at least one side of a sum,
encodes to the zero vector (``can_vanish`` is false).
"""

from __future__ import annotations

from dataclasses import dataclass

from riftco.cajal.errors import TypeFormationError


@dataclass(frozen=True)
class UnitType:
    """The type with exactly one value, ``()``."""

    def __str__(self) -> str:
        return format_type(self)


@dataclass(frozen=True)
class SumType:
    """A value of ``left`` or a value of ``right``, tagged with its side."""

    left: Type
    right: Type

    def __post_init__(self) -> None:
        _require_types("Sum", self.left, self.right)
        if can_vanish(self.left) and can_vanish(self.right):
            raise TypeFormationError(
                f"Sum {self}: expected at least one side whose values never encode to zero, "
                "found two sides that both hold a zero-encoded value (an empty dictionary), "
                "so inl and inr could not be told apart"
            )

    def __str__(self) -> str:
        return format_type(self)


@dataclass(frozen=True)
class ProductType:
    """The additive product: a pair whose parts share one context; a projection picks one."""

    first: Type
    second: Type

    def __post_init__(self) -> None:
        _require_types("Product", self.first, self.second)

    def __str__(self) -> str:
        return format_type(self)


@dataclass(frozen=True)
class DictionaryType:
    """A finite map from one-hot keys to values that never encode to zero."""

    key: Type
    value: Type

    def __post_init__(self) -> None:
        _require_types("Dictionary", self.key, self.value)
        if not is_one_hot(self.key):
            raise TypeFormationError(
                f"Dictionary key type: expected a one-hot type (built from Unit and Sum "
                f"only), found {self.key}"
            )
        if can_vanish(self.value):
            raise TypeFormationError(
                f"Dictionary value type: expected a type whose values never encode to zero, "
                f"found {self.value}, which holds an empty dictionary"
            )

    def __str__(self) -> str:
        return format_type(self)


Type = UnitType | SumType | ProductType | DictionaryType


def _require_types(construct: str, *parts: object) -> None:
    for part in parts:
        if not isinstance(part, UnitType | SumType | ProductType | DictionaryType):
            raise TypeFormationError(
                f"{construct}: expected a type for each part, found {type(part).__name__} {part!r}"
            )


def dimension(type_: Type) -> int:
    """The length of the dense encoding of a value of ``type_``."""
    match type_:
        case UnitType():
            return 1
        case SumType(left, right):
            return dimension(left) + dimension(right)
        case ProductType(first, second):
            return dimension(first) + dimension(second)
        case DictionaryType(key, value):
            return dimension(key) * dimension(value)
    raise TypeFormationError(f"expected a type, found {type_!r}")


def cardinality(type_: Type) -> int:
    """How many values ``type_`` has (dictionaries are partial maps)."""
    match type_:
        case UnitType():
            return 1
        case SumType(left, right):
            return cardinality(left) + cardinality(right)
        case ProductType(first, second):
            return cardinality(first) * cardinality(second)
        case DictionaryType(key, value):
            return (cardinality(value) + 1) ** cardinality(key)
    raise TypeFormationError(f"expected a type, found {type_!r}")


def is_one_hot(type_: Type) -> bool:
    """Whether every value encodes to a standard basis vector (Unit and Sum only)."""
    match type_:
        case UnitType():
            return True
        case SumType(left, right):
            return is_one_hot(left) and is_one_hot(right)
    return False


def can_vanish(type_: Type) -> bool:
    """Whether some value of ``type_`` encodes to the zero vector."""
    match type_:
        case UnitType():
            return False
        case SumType(left, right):
            return can_vanish(left) or can_vanish(right)
        case ProductType(first, second):
            return can_vanish(first) and can_vanish(second)
        case DictionaryType():
            return True
    raise TypeFormationError(f"expected a type, found {type_!r}")


def format_type(type_: Type) -> str:
    """Source text for a type; ``+`` binds looser than ``&``, both associate to the right."""
    return _format(type_, 0)


def _format(type_: Type, level: int) -> str:
    match type_:
        case UnitType():
            return "Unit"
        case SumType(UnitType(), UnitType()):
            return "Bool"
        case SumType(left, right):
            text = f"{_format(left, 1)} + {_format(right, 0)}"
            return f"({text})" if level > 0 else text
        case ProductType(first, second):
            text = f"{_format(first, 2)} & {_format(second, 1)}"
            return f"({text})" if level > 1 else text
        case DictionaryType(key, value):
            return f"Dict[{_format(key, 0)}, {_format(value, 0)}]"
    raise TypeFormationError(f"expected a type, found {type_!r}")


UNIT = UnitType()
BOOL = SumType(UNIT, UNIT)
"""``Unit + Unit``: ``inl ()`` is false, ``inr ()`` is true by convention."""
