import pytest

from riftco.cajal import (
    BOOL,
    UNIT,
    UNIT_VALUE,
    DictionaryType,
    DictionaryValue,
    EvaluationError,
    LeftValue,
    PairValue,
    RightValue,
    evaluate,
    parse,
)
from riftco.cajal.examples import example

FALSE, TRUE = LeftValue(UNIT_VALUE, BOOL), RightValue(UNIT_VALUE, BOOL)
TABLE = DictionaryType(BOOL, BOOL)


def test_boolean_programs():
    for x in (FALSE, TRUE):
        assert evaluate(example("not").expression, {"x": x}) == (TRUE if x == FALSE else FALSE)
        for y in (FALSE, TRUE):
            both = {"x": x, "y": y}
            assert evaluate(example("and").expression, both) == (
                TRUE if (x, y) == (TRUE, TRUE) else FALSE
            )
            assert evaluate(example("xor").expression, both) == (TRUE if x != y else FALSE)


def test_tuple_and_projection():
    value = evaluate(parse("(snd p, fst p)"), {"p": PairValue(TRUE, UNIT_VALUE)})
    assert value == PairValue(UNIT_VALUE, TRUE)


def test_lookup_needs_exactly_one_matching_key():
    table = DictionaryValue(TABLE, ((TRUE, FALSE),))
    assert evaluate(parse("d[k]"), {"d": table, "k": TRUE}) == FALSE
    with pytest.raises(EvaluationError, match="expected exactly one matching entry, found 0"):
        evaluate(parse("d[k]"), {"d": table, "k": FALSE})


def test_dictionary_literal_rejects_duplicate_keys():
    program = parse("dict[Bool, Unit] {k: (), inl[Bool] (): ()}")
    assert evaluate(program, {"k": TRUE}) == DictionaryValue(
        DictionaryType(BOOL, UNIT), ((FALSE, UNIT_VALUE), (TRUE, UNIT_VALUE))
    )
    with pytest.raises(EvaluationError, match=r"expected unique keys, found inl \(\)"):
        evaluate(program, {"k": FALSE})


def test_evaluation_is_deterministic():
    program = example("store-then-read").expression
    inputs = {"k": TRUE, "v": FALSE, "q": TRUE}
    assert {evaluate(program, inputs) for _ in range(5)} == {FALSE}


@pytest.mark.parametrize(
    ("source", "environment", "message"),
    [
        ("x", {}, "expected a value for variable 'x', found none"),
        ("fst x", {"x": TRUE}, "projection: expected a pair, found inr ()"),
        ("x; ()", {"x": TRUE}, "sequence: expected () from the first part, found inr ()"),
        ("case x of inl a => a | inr b => b", {"x": UNIT_VALUE}, "expected inl or inr"),
        ("x[()]", {"x": TRUE}, "lookup: expected a dictionary"),
        ("inl[Bool] x", {"x": TRUE}, "inl payload: expected a value of type Unit"),
        ("dict[Bool, Unit] {x: x}", {"x": TRUE}, "expected type Unit, found Bool"),
    ],
)
def test_unchecked_programs_fail_with_what_was_expected(source, environment, message):
    with pytest.raises(EvaluationError) as caught:
        evaluate(parse(source), environment)
    assert message in str(caught.value)
