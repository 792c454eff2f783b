"""Parity with the Hugging Face ``tokenizers`` library (the ``parity`` extra)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riftco.text import (
    BpeTokenizer,
    ByteTokenizer,
    ExportError,
    save_hf_tokenizer_json,
    to_hf_tokenizer_json,
)

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.parity


def documentation() -> str:
    import pydoc_data.topics

    return "".join(pydoc_data.topics.topics.values())


def hf(tok):
    return tokenizers.Tokenizer.from_str(json.dumps(to_hf_tokenizer_json(tok)))


@pytest.fixture(scope="module", params=["none", "gpt2"])
def pair(request):
    tok = BpeTokenizer.train(documentation()[:100_000], 1000, 2, request.param)
    return tok, hf(tok)


def test_same_ids_on_held_out_text(pair):
    tok, other = pair
    text = documentation()[200_000:260_000]
    ids = tok.encode(text)
    assert other.encode(text).ids == ids
    assert other.decode(ids) == text
    assert other.get_vocab_size() == tok.vocab_size


def test_special_tokens(pair):
    tok, other = pair
    text = "<|user|>Hello there<|end|><|assistant|>Hi.<|end|><|endoftext|>"
    assert other.encode(text).ids == tok.encode(text, allow_special=True)
    assert other.token_to_id("<|endoftext|>") == tok.eos_id


def test_chat_template_ids(pair):
    tok, other = pair
    chat = tok.apply_chat_template([{"role": "user", "content": "Define a class."}], True)
    assert other.encode(chat.text).ids == chat.ids


latin = st.text(st.characters(max_codepoint=0xFF, exclude_categories=["Cs"]), max_size=200)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=latin)
def test_same_ids_on_latin_text(pair, text):
    tok, other = pair
    assert other.encode(text).ids == tok.encode(text, allow_special=True)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=100))
def test_same_ids_on_any_text_without_regex(pair, text):
    tok, other = pair
    if tok.pretokenize == "none":  # the GPT-2 regex differs on a few non-Latin characters
        assert other.encode(text).ids == tok.encode(text, allow_special=True)


def test_byte_tokenizer():
    tok = ByteTokenizer.train(documentation()[:20_000])
    text = documentation()[:5000]
    assert hf(tok).encode(text).ids == tok.encode(text)


def test_duplicate_tokens_cannot_be_exported():
    # "abc" reached twice: (a, b) then (ab, c), and (b, c) then (a, bc)
    tok = BpeTokenizer([(97, 98), (256, 99), (98, 99), (97, 258)])
    with pytest.raises(ExportError, match="ids 257 and 259 both stand for b'abc'"):
        to_hf_tokenizer_json(tok)


def test_saved_file_loads(pair, tmp_path):
    tok, _ = pair
    path = tmp_path / "tokenizer.json"
    save_hf_tokenizer_json(tok, path)
    text = "def f(x):\n    return x ** 2  # squares"
    assert tokenizers.Tokenizer.from_file(str(path)).encode(text).ids == tok.encode(text)
