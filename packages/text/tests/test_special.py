import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text import (
    DEFAULT_SPECIAL_TOKENS,
    BpeTokenizer,
    ByteTokenizer,
    SpecialTokenError,
)

SETTINGS = settings(max_examples=100, deadline=None)
CORPUS = "<|endoftext|> <|user|> hello <|end|> " * 10 + "".join(map(chr, range(32, 127)))


def all_kinds():
    return [
        ByteTokenizer.train(CORPUS),
        BpeTokenizer.train(CORPUS, 400, 2, "none"),
        BpeTokenizer.train(CORPUS, 400, 2, "gpt2"),
    ]


@pytest.mark.parametrize("tok", all_kinds(), ids=["byte", "bpe-none", "bpe-gpt2"])
def test_special_ids_follow_the_ordinary_ones(tok):
    assert list(tok.special_tokens) == list(DEFAULT_SPECIAL_TOKENS)
    assert list(tok.special_tokens.values()) == list(
        range(tok.base_vocab_size, tok.base_vocab_size + len(DEFAULT_SPECIAL_TOKENS))
    )
    assert tok.vocab_size == tok.base_vocab_size + 5


@pytest.mark.parametrize("tok", all_kinds(), ids=["byte", "bpe-none", "bpe-gpt2"])
def test_recognised_only_when_allowed(tok):
    text = "hello<|endoftext|>"
    eos = tok.special_tokens["<|endoftext|>"]
    assert tok.encode(text, allow_special=True)[-1] == eos
    assert eos not in tok.encode(text)
    assert tok.decode(tok.encode(text, allow_special=True)) == text
    assert tok.decode(tok.encode(text, allow_special=True), skip_special=True) == "hello"


@pytest.mark.parametrize("tok", all_kinds(), ids=["byte", "bpe-none", "bpe-gpt2"])
@SETTINGS
@given(st.lists(st.sampled_from([*DEFAULT_SPECIAL_TOKENS, "<|", "|>", "hello", " ", "e"])))
def test_never_produced_from_plain_text(tok, parts):
    text = "".join(parts)
    ids = tok.encode(text)
    assert all(i < tok.base_vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, allow_special=True)) == text


def test_merges_never_make_special_ids():
    tok = BpeTokenizer.train("<|endoftext|>" * 50, vocab_size=300)
    assert max(tok.encode("<|endoftext|>" * 3)) < tok.base_vocab_size


def test_longest_special_token_wins():
    tok = BpeTokenizer([], special_tokens=["<|a|>", "<|a|>x"])
    assert tok.encode("<|a|>x", allow_special=True) == [257]
    assert tok.encode("<|a|>y", allow_special=True) == [256, ord("y")]


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["a", "a"], "appears twice"),
        ([""], "1 to 256 characters; found 0"),
        (["x" * 300], "found 300"),
        ([3], "expected a string; found int"),
        ("<|endoftext|>", "found the string"),
        (["\ud800"], "not valid Unicode"),
    ],
)
def test_bad_special_tokens(tokens, message):
    with pytest.raises(SpecialTokenError, match=message):
        BpeTokenizer([], special_tokens=tokens)


def test_eos_must_be_a_special_token():
    with pytest.raises(SpecialTokenError, match="eos_token among the special tokens"):
        BpeTokenizer.train("abc", special_tokens=["<|x|>"], chat_template=None)
    tok = BpeTokenizer.train("abc", special_tokens=[], eos_token=None, chat_template=None)
    with pytest.raises(SpecialTokenError, match="no end-of-text token"):
        _ = tok.eos_id
