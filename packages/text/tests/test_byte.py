import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text import ByteTokenizer, EncodeError, TrainingError

SETTINGS = settings(max_examples=100, deadline=None)


def test_vocabulary_is_the_sorted_distinct_bytes():
    tok = ByteTokenizer.train("hello")
    assert tok.byte_vocab == b"ehlo"
    assert tok.encode("hole") == [1, 3, 2, 0]
    assert tok.base_vocab_size == 4
    assert tok.special_tokens["<|endoftext|>"] == 4
    assert tok.eos_id == tok.end_of_text_id == 4


def test_unknown_byte_names_the_byte_and_its_position():
    tok = ByteTokenizer.train("hello")
    with pytest.raises(EncodeError, match=r"byte 0x78 at byte offset 2"):
        tok.encode("hex")
    with pytest.raises(EncodeError, match=r"byte 0x78 at byte offset 10"):
        tok.encode("<|user|>hex", allow_special=True)
    with pytest.raises(EncodeError, match=r"byte 0xff at byte offset 0"):
        tok.encode_bytes(b"\xff")


def test_empty_corpus_is_rejected():
    with pytest.raises(TrainingError, match="non-empty corpus; found 0 bytes"):
        ByteTokenizer.train("")
    with pytest.raises(TrainingError, match="non-empty corpus"):
        ByteTokenizer.train(b"")


def test_bytes_corpus():
    tok = ByteTokenizer.train(b"\x00\xff\x10")
    assert tok.byte_vocab == b"\x00\x10\xff"
    assert tok.encode_bytes(b"\xff\x00") == [2, 0]
    assert tok.decode_bytes([2, 0]) == b"\xff\x00"


@SETTINGS
@given(st.text(min_size=1))
def test_text_round_trip(text):
    tok = ByteTokenizer.train(text)
    assert tok.decode(tok.encode(text)) == text


@SETTINGS
@given(st.binary(min_size=1))
def test_bytes_round_trip(data):
    tok = ByteTokenizer.train(data, special_tokens=(), eos_token=None, chat_template=None)
    assert tok.decode_bytes(tok.encode_bytes(data)) == data
    assert max(tok.encode_bytes(data)) < tok.vocab_size
