import itertools

import pytest
from cajal_strategies import types, values_of
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.cajal import (
    BOOL,
    UNIT,
    UNIT_VALUE,
    DictionaryType,
    DictionaryValue,
    EncodingError,
    LeftValue,
    PairValue,
    ProductType,
    RightValue,
    SumType,
    cardinality,
    decode,
    dimension,
    encode,
    enumerate_values,
)

FALSE, TRUE = LeftValue(UNIT_VALUE, BOOL), RightValue(UNIT_VALUE, BOOL)


def test_encodings_by_hand():
    assert encode(UNIT_VALUE) == (1.0,)
    assert encode(FALSE) == (1.0, 0.0)
    assert encode(RightValue(TRUE, SumType(UNIT, BOOL))) == (0.0, 0.0, 1.0)
    assert encode(PairValue(TRUE, UNIT_VALUE)) == (0.0, 1.0, 1.0)
    table = DictionaryValue(DictionaryType(BOOL, BOOL), ((TRUE, FALSE),))
    assert encode(table) == (0.0, 0.0, 1.0, 0.0)  # row 1 (key inr) holds enc(inl ())


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_decode_inverts_encode(data):
    type_ = data.draw(types(6))
    value = data.draw(values_of(type_))
    vector = encode(value)
    assert len(vector) == dimension(type_)
    assert set(vector) <= {0.0, 1.0}
    assert decode(type_, vector) == value


@pytest.mark.parametrize(
    "type_",
    [
        SumType(DictionaryType(BOOL, UNIT), BOOL),
        ProductType(DictionaryType(BOOL, BOOL), DictionaryType(UNIT, UNIT)),
        DictionaryType(SumType(UNIT, BOOL), ProductType(DictionaryType(BOOL, UNIT), UNIT)),
    ],
)
def test_encoding_is_injective(type_):
    values = enumerate_values(type_)
    assert len({encode(v) for v in values}) == len(values) == cardinality(type_)


def test_decoding_rounds_noisy_vectors_only_when_asked():
    noisy = (0.9, 0.2)
    with pytest.raises(EncodingError, match=r"distance 0\.2 from the nearest value inl"):
        decode(BOOL, noisy)
    assert decode(BOOL, noisy, tolerance=None) == FALSE
    table_type = DictionaryType(BOOL, UNIT)
    assert decode(table_type, (0.1, 0.8), tolerance=None) == DictionaryValue(
        table_type, ((TRUE, UNIT_VALUE),)
    )


def test_decode_checks_length():
    with pytest.raises(EncodingError, match="expected a vector of length 2, found length 3"):
        decode(BOOL, (1.0, 0.0, 0.0))


def test_every_small_vector_of_zeros_and_ones_decodes_or_is_rejected():
    type_ = SumType(DictionaryType(BOOL, UNIT), UNIT)
    encodings = {encode(v) for v in enumerate_values(type_)}
    for bits in itertools.product((0.0, 1.0), repeat=dimension(type_)):
        if bits in encodings:
            assert encode(decode(type_, bits)) == bits
        else:
            with pytest.raises(EncodingError):
                decode(type_, bits)
