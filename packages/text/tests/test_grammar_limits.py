"""Hostile schemas are refused typed, early, whatever their size."""

import json

import pytest
from grammar_walk import EOS, SPECIAL, VOCAB
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text.grammar import (
    GrammarError,
    GrammarLimitError,
    GrammarLimits,
    SchemaError,
    TokenGrammar,
)


def compile_(schema, **limits):
    return TokenGrammar.compile(
        schema, VOCAB, eos_ids=[EOS], special_ids=[SPECIAL], limits=GrammarLimits(**limits)
    )


def nested(depth, make):
    schema = {"type": "integer"}
    for _ in range(depth):
        schema = make(schema)
    return schema


def test_deep_schema_refused():
    deep = nested(5000, lambda s: {"type": "array", "items": s})
    with pytest.raises(GrammarLimitError, match="max_schema_depth"):
        compile_(deep)
    # within the schema limits but deeper than a document may nest
    with pytest.raises(GrammarLimitError, match="max_depth"):
        compile_(nested(40, lambda s: {"type": "array", "items": s, "minItems": 1}))
    # optional nesting is fine: documents stop where the depth limit says
    compile_(nested(40, lambda s: {"type": "array", "items": s}))


def test_huge_enum_and_literals_refused():
    with pytest.raises(GrammarLimitError, match="max_enum"):
        compile_({"enum": list(range(10**6))})
    with pytest.raises(GrammarLimitError, match="max_literal_bytes"):
        compile_({"enum": ["x" * 100_000]})


def test_exponential_unions_refused():
    # 2**25 paths through nested anyOf, shared by $ref: compiled once each
    defs = {f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2} for i in range(25)}
    defs["a25"] = {"type": "string"}
    schema = {"$defs": defs, "$ref": "#/$defs/a0"}
    grammar = compile_(schema)  # flattened, the union is one string
    assert grammar.start().allows(ord('"'))
    # unions of objects that all begin with "{" run side by side; nested, they multiply
    wide = {"anyOf": [{"type": "object", "properties": {"k": {"$ref": "#"}}}] * 8}
    with pytest.raises(GrammarLimitError, match="max_stacks"):
        compile_(wide)
    many = {"anyOf": [{"const": i} for i in range(100)]}
    with pytest.raises(GrammarLimitError, match="max_alternatives"):
        compile_(many)


def test_many_objects_refused():
    props = {
        f"p{i}": {"type": "object", "properties": {"q": {"type": "string"}}} for i in range(300)
    }
    with pytest.raises(GrammarLimitError, match="max_properties"):
        compile_({"type": "object", "properties": props})
    flat = {"anyOf": [{"type": "array", "items": {"type": "string"}}] * 60}
    with pytest.raises(GrammarLimitError, match="max_schema_objects"):
        compile_({"type": "array", "items": {"anyOf": [flat] * 60}}, max_schema_objects=1000)
    with pytest.raises(GrammarLimitError, match="max_length"):
        compile_({"type": "string", "maxLength": 10**9})


def test_limits_validated():
    with pytest.raises(ValueError, match="max_depth"):
        GrammarLimits(max_depth=0)


def test_refusals_are_schema_errors_a_server_can_answer():
    try:
        compile_({"type": "string", "format": "hostname"})
    except SchemaError as exc:
        body = {"error": {"message": str(exc), "param": exc.keyword}}
        assert json.loads(json.dumps(body))["error"]["param"] == "format"
    else:
        raise AssertionError("format was accepted")


KEYWORDS = [
    "type", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "allOf",
    "$ref", "$defs", "pattern", "format", "title", "x",
]  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 40) | st.floats(allow_nan=False)
    | st.sampled_from(["object", "array", "string", "number", "integer", "boolean", "null",
                       "#", "#/$defs/a", "#/properties/a", "^a+$", "(", "date", "a"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from([*KEYWORDS, "a", "b"]), inner, max_size=5
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_any_document_compiles_or_is_refused_typed(schema):
    try:
        compile_(schema)
    except GrammarError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab()[]{}|*+?^$\\.-,:0123456789dDwWsSuxé", max_size=14))
def test_any_pattern_compiles_or_is_refused_typed(pattern):
    try:
        compile_({"type": "string", "pattern": pattern, "maxLength": 6})
    except GrammarError:
        pass
