import pytest
from cajal_strategies import types
from hypothesis import given, settings

from riftco.cajal import (
    BOOL,
    UNIT,
    UNIT_VALUE,
    DictionaryType,
    DictionaryValue,
    InvalidValueError,
    LeftValue,
    PairValue,
    ProductType,
    RightValue,
    SumType,
    cardinality,
    enumerate_values,
    format_value,
    key_index,
    type_of,
)

FALSE, TRUE = LeftValue(UNIT_VALUE, BOOL), RightValue(UNIT_VALUE, BOOL)


@settings(max_examples=60, deadline=None)
@given(types(5).filter(lambda t: cardinality(t) <= 300))
def test_enumeration_lists_each_value_once_with_its_type(type_):
    values = enumerate_values(type_)
    assert len(values) == cardinality(type_)
    assert len(set(values)) == len(values)
    assert all(type_of(v) == type_ for v in values)


def test_enumeration_order_is_fixed():
    assert enumerate_values(BOOL) == (FALSE, TRUE)
    dictionaries = enumerate_values(DictionaryType(BOOL, UNIT))
    assert [format_value(d) for d in dictionaries] == [
        "{}",
        "{inr (): ()}",
        "{inl (): ()}",
        "{inl (): (), inr (): ()}",
    ]


def test_dictionary_entries_are_canonical():
    type_ = DictionaryType(BOOL, BOOL)
    one = DictionaryValue(type_, ((TRUE, FALSE), (FALSE, TRUE)))
    other = DictionaryValue(type_, ((FALSE, TRUE), (TRUE, FALSE)))
    assert one == other
    assert one.get(TRUE) == FALSE
    assert DictionaryValue(type_).get(TRUE) is None


def test_dictionary_rejects_duplicate_keys_and_wrong_types():
    type_ = DictionaryType(BOOL, UNIT)
    with pytest.raises(InvalidValueError, match="expected unique keys, found key inl"):
        DictionaryValue(type_, ((FALSE, UNIT_VALUE), (FALSE, UNIT_VALUE)))
    with pytest.raises(InvalidValueError, match="expected type Unit, found Bool"):
        DictionaryValue(type_, ((FALSE, TRUE),))


def test_runtime_types():
    assert type_of(PairValue(TRUE, UNIT_VALUE)) == ProductType(BOOL, UNIT)
    with pytest.raises(InvalidValueError, match="expected type Bool, found Unit"):
        type_of(LeftValue(UNIT_VALUE, SumType(BOOL, UNIT)))


def test_key_index_is_the_position_of_the_one():
    trit = SumType(UNIT, BOOL)
    assert [key_index(v) for v in enumerate_values(trit)] == [0, 1, 2]
    with pytest.raises(InvalidValueError, match="one-hot"):
        key_index(PairValue(UNIT_VALUE, UNIT_VALUE))
