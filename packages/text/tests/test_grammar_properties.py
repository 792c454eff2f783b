"""Property tests: random schemas, random walks through their grammars, brute-force masks."""

import json
import random

import jsonschema
import numpy as np
from grammar_walk import EOS, SPECIAL, VOCAB, walk
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from riftco.text import BpeTokenizer
from riftco.text.grammar import SchemaError, TokenGrammar

NAMES = st.sampled_from(["a", "b", "id", "név", 'q"t', "back\\slash", "x y", "ab", "abc"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6, allow_nan=False).filter(lambda f: not f.is_integer()),
    st.text(max_size=6),
)


def _string():
    low = st.integers(0, 3)
    high = st.one_of(st.none(), st.integers(3, 6))
    return st.builds(
        lambda lo, hi, use_lo: {
            "type": "string",
            **({"minLength": lo} if use_lo else {}),
            **({"maxLength": hi} if hi is not None else {}),
        },
        low,
        high,
        st.booleans(),
    )


PATTERNS = st.sampled_from(
    [
        {"type": "string", "pattern": r"^\d{2,3}(-\d)?$"},
        {"type": "string", "pattern": r"^(é|ab|a\\)+$", "maxLength": 5},
        {"type": "string", "pattern": r'^[^\s"]{1,3}$', "minLength": 2},
        {"type": "string", "pattern": r"x?y*"},
        {"type": "string", "pattern": r"^\u00e9?\n?$"},
    ]
)

LEAVES = st.one_of(
    _string(),
    PATTERNS,
    st.sampled_from(
        [
            {"type": "integer"},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": ["string", "null"]},
            {"type": ["integer", "boolean"]},
            {},
        ]
    ),
    st.lists(SCALARS, min_size=1, max_size=5, unique_by=json.dumps).map(lambda v: {"enum": v}),
    SCALARS.map(lambda v: {"const": v}),
)


def _objects(children):
    def build(props, required_flags, closed):
        schema = {"type": "object", "properties": props}
        required = [name for name, flag in zip(props, required_flags, strict=False) if flag]
        if required:
            schema["required"] = required
        if closed:
            schema["additionalProperties"] = False
        return schema

    return st.builds(
        build,
        st.dictionaries(NAMES, children, max_size=4),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.booleans(),
    )


def _arrays(children):
    return st.builds(
        lambda items, lo, extra: {
            "type": "array",
            "items": items,
            "minItems": lo,
            **({"maxItems": lo + extra} if extra is not None else {}),
        },
        children,
        st.integers(0, 2),
        st.one_of(st.none(), st.integers(0, 3)),
    )


SCHEMAS = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        _objects(children),
        _arrays(children),
        st.lists(children, min_size=1, max_size=3).map(lambda b: {"anyOf": b}),
        st.lists(children, min_size=1, max_size=3).map(lambda b: {"oneOf": b}),
        st.just({"type": "object"}),
    ),
    max_leaves=8,
)


def compile_(schema):
    try:
        return TokenGrammar.compile(schema, VOCAB, eos_ids=[EOS], special_ids=[SPECIAL])
    except SchemaError as exc:  # only oneOf with overlapping branches is refused here
        assert exc.keyword == "oneOf", exc
        assume(False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.integers(0, 2**32 - 1))
def test_every_walk_parses_and_validates(schema, seed):
    grammar = compile_(schema)
    rng = random.Random(seed)
    for _ in range(3):
        out = walk(grammar.start(), rng, budget=rng.randrange(0, 80))
        value = json.loads(out)
        jsonschema.validate(value, schema)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.integers(0, 2**32 - 1))
def test_masks_equal_brute_force(schema, seed):
    grammar = compile_(schema)
    rng = random.Random(seed)
    state = grammar.start()
    for _ in range(rng.randrange(0, 40)):
        _check_mask(grammar, state)
        allowed = state.allowed().nonzero()[0].tolist()
        choices = [i for i in allowed if i != EOS]
        if not choices:
            break
        state.advance(rng.choice(choices))
    _check_mask(grammar, state)


def _check_mask(grammar, state):
    """A token is allowed iff its bytes keep the byte automaton alive (EOS iff complete)."""
    automaton = grammar.automaton
    start = automaton.intern(state._config)
    expected = np.zeros(len(VOCAB), dtype=bool)
    for token, data in enumerate(VOCAB):
        if token in (EOS, SPECIAL):
            continue
        current = start
        for byte in data:
            current = automaton.step(current, byte)
            if current < 0:
                break
        expected[token] = current >= 0
    expected[EOS] = automaton.accepting(start)
    np.testing.assert_array_equal(state.allowed(), expected)


def test_masks_equal_brute_force_on_a_bpe_vocabulary():
    corpus = json.dumps({"name": "Ada", "tags": ["x", "y"], "n": 12.5, "ok": True}) * 40
    tok = BpeTokenizer.train(corpus, vocab_size=400)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "number"},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "tags", "n", "ok"],
        "additionalProperties": False,
    }
    grammar = TokenGrammar.for_tokenizer(schema, tok)
    vocab = tok.vocabulary_bytes()
    rng = random.Random(11)
    for _ in range(5):
        state = grammar.start()
        out = b""
        while not state.is_done():
            mask = state.allowed()
            for token in rng.sample(range(len(vocab)), 60) + mask.nonzero()[0].tolist()[:40]:
                assert mask[token] == state.allows(token), (out, token)
            token = rng.choice(mask.nonzero()[0].tolist())
            state.advance(token)
            if not state.is_done():
                out += vocab[token]
        jsonschema.validate(json.loads(out), schema)
