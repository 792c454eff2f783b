import pytest

from riftco.cajal import (
    BOOL,
    UNIT,
    DictionaryType,
    ProductType,
    SumType,
    TypeFormationError,
    can_vanish,
    cardinality,
    dimension,
    format_type,
    is_one_hot,
    parse_type,
)

TRIT = SumType(UNIT, BOOL)


def test_dimensions_follow_the_rules():
    assert dimension(UNIT) == 1
    assert dimension(BOOL) == 2
    assert dimension(ProductType(BOOL, TRIT)) == 2 + 3
    assert dimension(SumType(ProductType(BOOL, BOOL), UNIT)) == 4 + 1
    assert dimension(DictionaryType(TRIT, ProductType(BOOL, UNIT))) == 3 * 3


def test_cardinalities_count_partial_maps():
    assert cardinality(UNIT) == 1
    assert cardinality(TRIT) == 3
    assert cardinality(ProductType(BOOL, TRIT)) == 6
    assert cardinality(DictionaryType(BOOL, TRIT)) == (3 + 1) ** 2


def test_types_are_immutable_and_compare_by_structure():
    assert SumType(UNIT, UNIT) == BOOL
    assert hash(ProductType(BOOL, UNIT)) == hash(ProductType(BOOL, UNIT))
    with pytest.raises(AttributeError):
        BOOL.left = BOOL  # type: ignore[misc]


def test_one_hot_and_vanishing():
    assert is_one_hot(TRIT)
    assert not is_one_hot(ProductType(UNIT, UNIT))
    dictionary = DictionaryType(BOOL, UNIT)
    assert can_vanish(dictionary)
    assert can_vanish(ProductType(dictionary, dictionary))
    assert not can_vanish(ProductType(dictionary, UNIT))
    assert can_vanish(SumType(dictionary, UNIT))


def test_dictionary_key_must_be_one_hot():
    with pytest.raises(TypeFormationError, match=r"expected a one-hot type.*found Bool & Unit"):
        DictionaryType(ProductType(BOOL, UNIT), UNIT)


def test_dictionary_value_must_not_vanish():
    with pytest.raises(TypeFormationError, match="never encode to zero"):
        DictionaryType(BOOL, DictionaryType(BOOL, UNIT))


def test_sum_needs_one_side_that_does_not_vanish():
    dictionary = DictionaryType(BOOL, UNIT)
    SumType(dictionary, UNIT)
    with pytest.raises(TypeFormationError, match="could not be told apart"):
        SumType(dictionary, dictionary)


def test_parts_must_be_types():
    with pytest.raises(TypeFormationError, match="expected a type"):
        ProductType(UNIT, "Unit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Unit", UNIT),
        ("Bool", BOOL),
        ("Unit + Unit + Unit", SumType(UNIT, BOOL)),
        ("(Unit + Unit) + Unit", SumType(BOOL, UNIT)),
        ("Unit & Bool + Unit", SumType(ProductType(UNIT, BOOL), UNIT)),
        ("Unit & (Bool + Unit)", ProductType(UNIT, SumType(BOOL, UNIT))),
        ("Dict[Bool, Unit & Bool]", DictionaryType(BOOL, ProductType(UNIT, BOOL))),
    ],
)
def test_type_syntax_round_trips(text, expected):
    assert parse_type(text) == expected
    assert parse_type(format_type(expected)) == expected
