"""Strict JSON: standard documents only, bounded depth and integers, typed errors."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riftco.core import JSONError, loads_strict


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": [1, 2.5, "x", null, true]}', {"a": [1, 2.5, "x", None, True]}),
        (b'{"\\u00e9": "\xc3\xa9"}', {"é": "é"}),
        ('"[[[[{"', "[[[[{"),
        ("-12", -12),
    ],
)
def test_standard_documents_load(text, value):
    assert loads_strict(text) == value


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"x": {"b": 1, "b": 1}}', "duplicate key 'b'"),
        ('{"a": NaN}', "expected standard JSON; found NaN"),
        ("[Infinity]", "expected standard JSON; found Infinity"),
        ("-Infinity", "expected standard JSON; found -Infinity"),
        ("[1e999]", "beyond a finite float"),
        ("-1e400", "beyond a finite float"),
        ("{not json", "expected JSON"),
        ("", "expected JSON"),
        (b"\xff\xfe{}", "expected UTF-8"),
        ("1" * 101, "at most 100 digits; found one of 101"),
        ("[-" + "9" * 200 + "]", "found one of 200"),
    ],
)
def test_refusals_are_typed_and_say_what_was_found(text, match):
    with pytest.raises(JSONError, match=match):
        loads_strict(text)


def test_depth_is_bounded_and_adjustable():
    assert loads_strict("[" * 64 + "]" * 64) is not None
    with pytest.raises(
        JSONError, match="nested too deeply: expected at most 64 .* found at least 65"
    ):
        loads_strict("[" * 65 + "]" * 65)
    assert loads_strict('{"a": ' * 3 + "1" + "}" * 3, max_depth=3) == {"a": {"a": {"a": 1}}}
    with pytest.raises(JSONError, match="at most 2 levels"):
        loads_strict('{"a": [[1]]}', max_depth=2)


def test_brackets_inside_strings_do_not_count():
    text = json.dumps(["[" * 500, {"k": '{\\"' * 100}])
    assert loads_strict(text, max_depth=2) == json.loads(text)


def test_integer_digits_are_adjustable():
    assert loads_strict("12345", max_int_digits=5) == 12345
    with pytest.raises(JSONError, match="at most 4 digits"):
        loads_strict("12345", max_int_digits=4)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[" * 1_000_000, "nested too deeply"),
        ("7" * 1_000_000, "at most 100 digits"),
        # An unterminated string of escaped quotes: a scan that restarted at every
        # quote would be quadratic (hours at this size); this one is linear.
        ('["' + '\\"[' * 300_000, "expected JSON"),
    ],
)
def test_hostile_inputs_are_refused(text, match):
    with pytest.raises(JSONError, match=match):
        loads_strict(text)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(json_values)
def test_agrees_with_the_standard_library_on_standard_documents(value):
    text = json.dumps(value)
    assert loads_strict(text) == json.loads(text)
