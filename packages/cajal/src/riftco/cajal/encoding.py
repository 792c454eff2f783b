"""Dense encodings of finite values, and discrete decoding back to values.

- Unit encodes to ``[1.0]``.
- ``inl a`` of ``A + B`` encodes to ``enc(a)`` followed by d_B zeros; ``inr b`` to d_A zeros
  followed by ``enc(b)``.
- A pair of ``A & B`` encodes to ``enc(a)`` followed by ``enc(b)``.
- A dictionary of ``Dict[K, V]`` encodes to the sum over its entries of
  ``outer(enc(k), enc(v))``, flattened row-major (key-major): entry ``(k, v)`` fills row
  ``key_index(k)`` of a d_K x d_V matrix.

Every encoding is a 0/1 vector, and the formation rules of the types make the encoding
injective, so ``decode(t, encode(v)) == v`` for every value ``v`` of ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence

from riftco.cajal.errors import EncodingError
from riftco.cajal.types import (
    DictionaryType,
    ProductType,
    SumType,
    Type,
    UnitType,
    can_vanish,
    dimension,
)
from riftco.cajal.values import (
    UNIT_VALUE,
    DictionaryValue,
    LeftValue,
    PairValue,
    RightValue,
    UnitValue,
    Value,
    enumerate_values,
    format_value,
    key_index,
)

PRESENT = 0.5
"""A block whose largest entry exceeds this holds a value (encodings are 0/1 vectors)."""


def encode(value: Value) -> tuple[float, ...]:
    """The dense encoding of ``value``; its length is ``dimension(type_of(value))``."""
    return tuple(_encode(value))


def _encode(value: Value) -> list[float]:
    match value:
        case UnitValue():
            return [1.0]
        case LeftValue(payload, sum_type):
            return _encode(payload) + [0.0] * dimension(sum_type.right)
        case RightValue(payload, sum_type):
            return [0.0] * dimension(sum_type.left) + _encode(payload)
        case PairValue(first, second):
            return _encode(first) + _encode(second)
        case DictionaryValue(dictionary_type, entries):
            width = dimension(dictionary_type.value)
            vector = [0.0] * dimension(dictionary_type)
            for key, stored in entries:
                start = key_index(key) * width
                vector[start : start + width] = _encode(stored)
            return vector
    raise EncodingError(f"expected a value, found {type(value).__name__} {value!r}")


def decode(type_: Type, vector: Sequence[float], tolerance: float | None = 1e-6) -> Value:
    """The value of ``type_`` whose encoding ``vector`` is.

    Decoding is discrete: each sum picks a side, each dictionary row is present or
    absent. With a ``tolerance``, the vector must lie within it (in max norm) of the
    encoding of the decoded value; with ``tolerance=None`` the nearest value is returned
    whatever the distance (for vectors that a learned model produced).
    """
    vector = [float(x) for x in vector]
    expected = dimension(type_)
    if len(vector) != expected:
        raise EncodingError(
            f"decode {type_}: expected a vector of length {expected}, found length {len(vector)}"
        )
    value = _decode(type_, vector)
    if tolerance is not None:
        distance = max((abs(a - b) for a, b in zip(encode(value), vector)), default=0.0)
        if distance > tolerance:
            raise EncodingError(
                f"decode {type_}: expected the encoding of a value within {tolerance}, found a "
                f"vector at distance {distance:.3g} from the nearest value {format_value(value)}"
            )
    return value


def _decode(type_: Type, vector: list[float]) -> Value:
    match type_:
        case UnitType():
            return UNIT_VALUE
        case SumType(left, right):
            split = dimension(left)
            if _pick_left(left, right, vector[:split], vector[split:]):
                return LeftValue(_decode(left, vector[:split]), type_)
            return RightValue(_decode(right, vector[split:]), type_)
        case ProductType(first, second):
            split = dimension(first)
            return PairValue(_decode(first, vector[:split]), _decode(second, vector[split:]))
        case DictionaryType(key, stored):
            width = dimension(stored)
            entries = []
            for index, key_value in enumerate(enumerate_values(key)):
                row = vector[index * width : (index + 1) * width]
                if max(row) > PRESENT:
                    entries.append((key_value, _decode(stored, row)))
            return DictionaryValue(type_, tuple(entries))
    raise EncodingError(f"expected a type, found {type_!r}")


def _pick_left(left: Type, right: Type, left_block: list[float], right_block: list[float]) -> bool:
    if can_vanish(left):
        return max(right_block) <= PRESENT
    if can_vanish(right):
        return max(left_block) > PRESENT
    return max(left_block) >= max(right_block)
