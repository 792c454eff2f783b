import datetime
import json
import random

import jsonschema
import numpy as np
import pytest
from grammar_walk import EOS, SPECIAL, VOCAB, walk

from riftco.text import BpeTokenizer
from riftco.text.grammar import (
    GrammarError,
    SchemaError,
    TokenGrammar,
    TokenNotAllowed,
)


def grammar(schema, **options):
    return TokenGrammar.compile(schema, VOCAB, eos_ids=[EOS], special_ids=[SPECIAL], **options)


def feed(state, data: bytes):
    for byte in data:
        state.advance(byte)
    return state


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 3},
        "score": {"type": ["number", "null"]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "score", "ok"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "schema",
    [
        None,
        PERSON,
        {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
        {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"x": {"const": 1}}}]},
        {"type": "string", "minLength": 3},
        {"type": "number"},
    ],
)
def test_random_walks_parse_and_validate(schema):
    g = grammar(schema)
    rng = random.Random(7)
    for _ in range(25):
        out = walk(g.start(), rng)
        value = json.loads(out)
        if schema is None:
            assert isinstance(value, dict)
        else:
            jsonschema.validate(value, schema)


def test_mask_shape_and_eos():
    g = grammar(PERSON)
    state = g.start()
    mask = state.allowed()
    assert mask.dtype == np.bool_ and mask.shape == (len(VOCAB),)
    assert mask[ord("{")] and mask[VOCAB.index(b'{"')]
    assert not mask[EOS] and not mask[SPECIAL] and not mask[ord(" ")]
    feed(state, b'{"name":"x","age":1,"tags":[],"score":null,"ok":true}')
    mask = state.allowed()
    assert state.is_accepting()
    assert mask.nonzero()[0].tolist() == [EOS]
    state.advance(EOS)
    assert state.is_done() and not state.allowed().any()


def test_declared_order_and_optional_properties():
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "integer"},
            "c": {"type": "integer"},
        },
        "required": ["b"],
    }
    g = grammar(schema, max_whitespace=0)
    for text in [b'{"b":1}', b'{"a":1,"b":2}', b'{"b":1,"c":2}', b'{"a":0,"b":1,"c":2}']:
        assert feed(g.start(), text).is_accepting(), text
    for text in [b'{"c":1,"b":2}', b'{"a":1}', b"{}", b'{"b":1,}', b'{"b":1,"b":2}']:
        state = g.start()
        with pytest.raises(TokenNotAllowed):
            feed(state, text)
            state.advance(EOS)


def test_advance_refuses_typed():
    g = grammar({"type": "integer"})
    state = g.start()
    with pytest.raises(TokenNotAllowed, match="special token"):
        state.advance(SPECIAL)
    with pytest.raises(TokenNotAllowed, match="before the document is complete"):
        state.advance(EOS)
    with pytest.raises(TokenNotAllowed, match="cannot continue"):
        state.advance(ord("x"))
    with pytest.raises(TokenNotAllowed, match=r"\[0, "):
        state.advance(len(VOCAB))
    state.advance(ord("7"))
    copy = state.copy()
    copy.advance(EOS)
    assert copy.is_done() and not state.is_done()
    assert state.allows(ord("1")) and not state.allows(ord("."))


def test_whitespace_is_bounded():
    g = grammar(None, max_whitespace=2)
    state = feed(g.start(), b"{  ")
    assert not state.allows(ord(" "))
    assert not grammar(None).start().allows(ord(" "))  # none before the document
    done = feed(grammar({"type": "array"}).start(), b"[]")
    assert done.allowed().nonzero()[0].tolist() == [EOS]  # none after it


def test_strings_are_valid_utf8_and_json():
    g = grammar({"type": "string", "maxLength": 3})
    for text in ['"é\\u00e9"', '"\\n\\"x"', '"😀"', '""']:
        state = feed(g.start(), text.encode())
        assert state.is_accepting(), text
    for bad in [b'"\xff', b'"\xed\xa0\x80', b'"\xc0\xaf', b'"\\ud800', b'"\x01', b'"abcd']:
        with pytest.raises(TokenNotAllowed):
            feed(g.start(), bad)


def test_unsupported_keywords_name_themselves():
    for schema, keyword in [
        ({"type": "string", "pattern": "^(?=a)"}, "pattern"),
        ({"type": "string", "pattern": "(a)\\1"}, "pattern"),
        ({"type": "integer", "minimum": 0}, "minimum"),
        ({"type": "string", "format": "hostname"}, "format"),
        ({"type": "string", "format": "date", "pattern": "^2"}, "format"),
        ({"type": "object", "frobnicate": 1}, "frobnicate"),
        ({"type": "array", "items": [{}]}, "items"),
        ({"$ref": "http://example.com/s.json"}, "$ref"),
    ]:
        with pytest.raises(SchemaError) as info:
            grammar(schema)
        assert info.value.keyword == keyword, schema


def test_one_of_needs_branches_that_cannot_both_match():
    grammar({"oneOf": [{"type": "string"}, {"type": "integer"}, {"enum": [True, None]}]})
    grammar({"oneOf": [{"enum": [1, "a"]}, {"enum": [2, True]}]})
    for overlapping in [
        [{"type": "string"}, {"type": "string", "maxLength": 2}],
        [{"type": "number"}, {"type": "integer"}],
        [{"enum": [1]}, {"enum": [1.0]}],  # one value to JSON Schema
        [{"const": {"a": [1]}}, {"const": {"a": [1.0]}}],
    ]:
        with pytest.raises(SchemaError, match="oneOf") as info:
            grammar({"oneOf": overlapping})
        assert info.value.keyword == "oneOf"


def test_impossible_schemas_refused():
    for schema in [
        {"type": "string", "minLength": 3, "maxLength": 2},
        {"type": "integer", "enum": ["a"]},
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
        {
            "type": "object",
            "properties": {"n": {"$ref": "#"}},
            "required": ["n"],
        },
        False,
    ]:
        with pytest.raises(SchemaError):
            grammar(schema)


PATTERNS = [
    r"^\d{4}-\d{2}-\d{2}$",
    r"^[A-Z][a-z]+( [A-Z][a-z]+)*$",
    r"^(cat|dog|é+)\.?$",
    r"^[^a-z\s]{2,4}$",
    r"^\w{1,5}@\w{1,5}\.(com|org)$",
    r"ab?c*",
    r"^\u00e9\x41[\-_]$",
    r"^\\\"\n$",
    r"^.{3}$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_walk_to_matching_strings(pattern):
    schema = {"type": "string", "pattern": pattern}
    g = grammar(schema)
    rng = random.Random(5)
    for _ in range(20):
        value = json.loads(walk(g.start(), rng, budget=rng.randrange(30)))
        jsonschema.validate(value, schema)


@pytest.mark.parametrize("name", ["date", "time", "date-time", "uuid", "ipv4", "email"])
def test_formats_generate_valid_strings(name):
    schema = {"type": "string", "format": name}
    g = grammar(schema)
    rng = random.Random(4)
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for _ in range(15):
        value = json.loads(walk(g.start(), rng, budget=rng.randrange(40)))
        jsonschema.validate(value, schema, format_checker=checker)
        if name == "time":  # RFC 3339 full-time (jsonschema checks it only with extras)
            datetime.time.fromisoformat(value)
            assert value[8:9] in (".", "Z", "+", "-")
        elif name == "date-time":
            assert datetime.datetime.fromisoformat(value).tzinfo is not None


def test_pattern_with_length_bounds():
    schema = {"type": "string", "pattern": "^(ab|abc)+$", "minLength": 5, "maxLength": 5}
    g = grammar(schema)
    rng = random.Random(2)
    outs = {json.loads(walk(g.start(), rng)) for _ in range(20)}
    assert outs <= {"ababc", "abcab"} and outs
    with pytest.raises(SchemaError, match="no string matches"):
        grammar({"type": "string", "pattern": "^a{5}$", "maxLength": 4})
    with pytest.raises(SchemaError, match="matches no string"):
        grammar({"type": "string", "pattern": "[^\\s\\S]"})
    state = feed(grammar({"type": "string", "pattern": "^é$"}).start(), b'"\xc3')
    assert state.allows(0xA9) and not state.allows(0xA8)
    with pytest.raises(TokenNotAllowed):  # a UTF-8 lead that cannot become é
        feed(grammar({"type": "string", "pattern": "^é$"}).start(), b'"\xc4')


def test_recursive_schema_within_depth():
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v", "kids"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    with pytest.raises(SchemaError):  # $ref beside other keywords... only $defs beside
        grammar({**tree, "type": "object"})
    g = grammar(tree)
    rng = random.Random(3)
    for _ in range(10):
        jsonschema.validate(json.loads(walk(g.start(), rng)), tree)


def test_tokenizer_vocabulary():
    tok = BpeTokenizer.train('{"name": "ab", "age": 12} ' * 30, vocab_size=300)
    g = TokenGrammar.for_tokenizer(PERSON, tok)
    vocab = tok.vocabulary_bytes()
    assert len(vocab) == tok.vocab_size
    assert [tok.token_bytes(i) for i in range(tok.vocab_size)] == vocab
    rng = random.Random(1)
    for _ in range(5):
        out = walk(g.start(), rng, vocab=vocab, eos=tok.eos_id)
        jsonschema.validate(json.loads(out), PERSON)


def test_bad_arguments():
    with pytest.raises(GrammarError):
        TokenGrammar.compile(None, VOCAB, eos_ids=[])
    with pytest.raises(GrammarError):
        TokenGrammar.compile(None, VOCAB, eos_ids=[len(VOCAB)])
    with pytest.raises(GrammarError, match="bytes"):
        TokenGrammar.compile(None, ["a"], eos_ids=[0])
    with pytest.raises(GrammarError, match="begin a document"):
        TokenGrammar.compile(None, [b"x", b"<eos>"], eos_ids=[1])


def test_a_prepared_vocabulary_is_shared():
    from riftco.text.grammar import Vocabulary

    vocab = Vocabulary(VOCAB, eos_ids=[EOS], special_ids=[SPECIAL])
    one = TokenGrammar.compile({"type": "string"}, vocab)
    two = TokenGrammar.compile(PERSON, vocab)
    assert one.vocabulary is two.vocabulary is vocab
    feed(one.start(), b'"abc').allowed()
    assert vocab.string_tables  # built once, for every grammar over this vocabulary
    with pytest.raises(GrammarError, match="carries its own"):
        TokenGrammar.compile(None, vocab, eos_ids=[EOS])
    tok = BpeTokenizer.train("abc " * 20, vocab_size=260)
    assert Vocabulary.of_tokenizer(tok) is Vocabulary.of_tokenizer(tok)
    assert Vocabulary.of_tokenizer(tok, chat=True).eos_ids == tok.stop_ids(chat=True)


def test_a_dropped_state_table_is_rebuilt():
    from riftco.text.grammar import GrammarLimits

    small = grammar(PERSON, limits=GrammarLimits(max_states=8, mask_cache_bytes=64))
    full = grammar(PERSON)
    rng = random.Random(9)
    for _ in range(5):
        mine, theirs = small.start(), full.start()
        generations = small.automaton.generation
        while not mine.is_done():
            mask = mine.allowed()
            np.testing.assert_array_equal(mask, theirs.allowed())
            token = rng.choice(mask.nonzero()[0].tolist())
            mine.advance(token)
            theirs.advance(token)
        assert small.automaton.generation > generations  # it was dropped, and still agrees
