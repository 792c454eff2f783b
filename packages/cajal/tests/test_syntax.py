import pytest
from cajal_strategies import expressions
from hypothesis import given, settings

from riftco.cajal import (
    BOOL,
    UNIT,
    Case,
    Dictionary,
    DictionaryType,
    InjectLeft,
    InvalidNameError,
    Let,
    Lookup,
    ParseError,
    ProductType,
    Projection,
    Sequence,
    Tuple,
    Unit,
    Variable,
    parse,
    parse_context,
    print_expression,
)
from riftco.cajal.examples import EXAMPLES


@settings(max_examples=400, deadline=None)
@given(expressions())
def test_parse_inverts_print_for_every_expression(expression):
    assert parse(print_expression(expression)) == expression


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_examples_round_trip(example):
    assert parse(print_expression(example.expression)) == example.expression


def test_parse_builds_the_expected_tree():
    source = """
        # store a pair under k, read the first part back, branch on it
        let t = dict[Bool, Unit & Bool] {k: (u, v)} in
        case fst t[inl[Bool] ()] of inl a => a; b | inr c => c; b
    """
    table = Dictionary(
        DictionaryType(BOOL, ProductType(UNIT, BOOL)),
        ((Variable("k"), Tuple(Variable("u"), Variable("v"))),),
    )
    scrutinee = Projection(Lookup(Variable("t"), InjectLeft(Unit(), BOOL)), 0)
    case = Case(
        scrutinee,
        "a",
        Sequence(Variable("a"), Variable("b")),
        "c",
        Sequence(Variable("c"), Variable("b")),
    )
    assert parse(source) == Let("t", table, case)


def test_sequence_and_prefix_precedence():
    assert parse("fst x; y") == Sequence(Projection(Variable("x"), 0), Variable("y"))
    assert parse("fst x[k]") == Projection(Lookup(Variable("x"), Variable("k")), 0)
    assert parse("(fst x)[k]") == Lookup(Projection(Variable("x"), 0), Variable("k"))
    assert parse("a; b; c") == Sequence(Variable("a"), Sequence(Variable("b"), Variable("c")))
    assert print_expression(Sequence(Sequence(Variable("a"), Variable("b")), Unit())) == (
        "(a; b); ()"
    )


@pytest.mark.parametrize(
    ("source", "line", "column", "message"),
    [
        ("let x = y", 1, 10, "expected 'in', found end of input"),
        ("(x,\n  y", 2, 4, "expected ')', found end of input"),
        ("case x of inl a => a\n| inl b => b", 2, 3, "expected 'inr', found keyword 'inl'"),
        ("x ? y", 1, 3, "found '?'"),
        ("inl[Unit] ()", 1, 5, "inl: expected a Sum type in brackets, found Unit"),
        ("dict[Unit & Unit, Unit] {}", 1, 1, "expected a one-hot type"),
        ("let in = x in x", 1, 5, "expected a let binder name, found keyword 'in'"),
        ("x y", 1, 3, "expected end of input, found name 'y'"),
        ("\n\n   ]", 3, 4, "expected an expression"),
    ],
)
def test_parse_errors_give_line_and_column(source, line, column, message):
    with pytest.raises(ParseError) as caught:
        parse(source)
    assert (caught.value.line, caught.value.column) == (line, column)
    assert message in str(caught.value)


def test_context_syntax():
    assert parse_context("") == ()
    assert parse_context("x: Bool, d: Dict[Bool, Unit]") == (
        ("x", BOOL),
        ("d", DictionaryType(BOOL, UNIT)),
    )
    with pytest.raises(ParseError, match="expected ':'"):
        parse_context("x Bool")


def test_names_must_be_identifiers():
    with pytest.raises(InvalidNameError, match="found 'case'"):
        Variable("case")
    with pytest.raises(InvalidNameError, match="found '1x'"):
        Let("1x", Unit(), Unit())
