import pytest

from riftco.cajal import (
    BOOL,
    UNIT,
    DictionaryType,
    LinearityError,
    ProductType,
    Rule,
    SumType,
    TypeCheckError,
    TypeFormationError,
    check,
    parse,
    parse_context,
)
from riftco.cajal.examples import EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_examples_are_accepted(example):
    check(example.expression, example.context)


def test_types_of_constructs():
    context = parse_context("p: Bool & Unit, d: Dict[Bool, Unit + Bool], k: Bool")
    assert check(parse("(snd p, fst p)"), {"p": context[0][1]}) == ProductType(UNIT, BOOL)
    assert check(parse("d[k]"), context[1:]) == SumType(UNIT, BOOL)
    assert check(parse("dict[Bool, Unit] {}")) == DictionaryType(BOOL, UNIT)


REJECTIONS = [
    # (context, source, variable, rule, words the message must contain)
    ("x: Bool, y: Bool", "x", "y", Rule.DROPPED, "never uses it"),
    ("", "x", "x", Rule.UNBOUND, "does not declare"),
    ("u: Unit", "u; u", "u", Rule.DUPLICATED, "Sequence splits the context"),
    ("x: Bool, y: Bool", "(x, y)", "y", Rule.TUPLE_SHARES_CONTEXT, "share one context"),
    ("x: Bool", "(x, ())", "x", Rule.TUPLE_SHARES_CONTEXT, "used by part 1 and not by part 2"),
    ("u: Unit", "let v = u in ()", "v", Rule.BINDER_USED_ONCE, "never uses it"),
    ("u: Unit", "let v = u in (v; v)", "v", Rule.DUPLICATED, "both use 'v'"),
    ("u: Unit", "let u = () in u", "u", Rule.NO_SHADOWING, "already in scope"),
    (
        "x: Bool",
        "let a = () in case x of inl a => a | inr b => b",
        "a",
        Rule.NO_SHADOWING,
        "case inl binds 'a'",
    ),
    (
        "x: Bool, u: Unit",
        "case x of inl a => a; u | inr b => b; ()",
        "u",
        Rule.CASE_BRANCHES_AGREE,
        "the inl branch uses 'u' and the inr branch does not",
    ),
    ("x: Bool", "case x of inl a => () | inr b => b", "a", Rule.BINDER_USED_ONCE, "case inl"),
    (
        "x: Bool",
        "case x of inl a => a; x | inr b => b; x",
        "x",
        Rule.DUPLICATED,
        "between its scrutinee and its branches",
    ),
    (
        "k: Bool",
        "dict[Bool, Bool] {k: k}",
        "k",
        Rule.DICTIONARY_DISJOINT,
        "key and value use disjoint contexts",
    ),
    (
        "x: Bool, y: Bool",
        "dict[Bool, Bool] {inl[Bool] (): x, inr[Bool] (): y}",
        "y",
        Rule.DICTIONARY_SHARES_CONTEXT,
        "used by entry 2 and not by entry 1",
    ),
    ("d: Dict[Bool, Bool]", "d[fst (d, d)]", "d", Rule.DUPLICATED, "Lookup splits"),
]


@pytest.mark.parametrize(
    ("context", "source", "variable", "rule", "words"),
    REJECTIONS,
    ids=[f"{r[3].value}:{r[1]}" for r in REJECTIONS],
)
def test_linearity_rejections_name_the_variable_and_the_rule(
    context, source, variable, rule, words
):
    with pytest.raises(LinearityError) as caught:
        check(parse(source), parse_context(context))
    assert caught.value.variable == variable
    assert caught.value.rule == rule
    assert variable in str(caught.value) and rule.value in str(caught.value)
    assert words in str(caught.value)


def test_context_declares_each_name_once():
    with pytest.raises(LinearityError) as caught:
        check(parse("x"), [("x", BOOL), ("x", BOOL)])
    assert caught.value.rule == Rule.DUPLICATE_CONTEXT_NAME


def test_context_entries_are_types():
    with pytest.raises(TypeFormationError, match="expected a type"):
        check(parse("x"), [("x", "Bool")])


@pytest.mark.parametrize(
    ("context", "source", "message"),
    [
        ("x: Bool, y: Bool", "x; y", "Sequence first part: expected type Unit, found Bool"),
        ("x: Bool", "fst x", "fst: expected a Product (A & B), found Bool"),
        ("p: Unit & Unit", "case p of inl a => a | inr b => b", "expected a scrutinee of a Sum"),
        (
            "x: Bool",
            "case x of inl a => a | inr b => b; inl[Bool] ()",
            "found Unit (inl branch) and Bool (inr branch)",
        ),
        ("x: Bool", "inl[Unit + Bool] x", "inl[Unit + Bool]: expected type Unit, found Bool"),
        ("x: Bool, k: Bool", "x[k]", "lookup: expected a Dictionary, found Bool"),
        (
            "d: Dict[Bool, Unit], k: Unit",
            "d[k]",
            "lookup key: expected type Bool, found Unit",
        ),
        ("u: Unit", "dict[Bool, Unit] {u: ()}", "key: expected type Bool, found Unit"),
    ],
)
def test_type_errors_say_what_was_expected_and_found(context, source, message):
    with pytest.raises(TypeCheckError) as caught:
        check(parse(source), parse_context(context))
    assert message in str(caught.value)
    assert "(in `" in str(caught.value)
