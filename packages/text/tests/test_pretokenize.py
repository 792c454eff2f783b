from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text.pretokenize import split_bytes, split_text


def test_gpt2_pieces():
    text = "Hello world, it's 2024!  ok\n\n x_y"
    assert split_text(text, "gpt2") == [
        "Hello", " world", ",", " it", "'s", " 2024", "!", " ", " ok", "\n\n", " x", "_", "y"
    ]  # fmt: skip


def test_information_separators_are_not_whitespace():
    # Python's \s matches U+001C..U+001F; Unicode White_Space (and GPT-2) does not
    assert split_text("a \x1c b", "gpt2") == ["a", " \x1c", " b"]


def test_none_keeps_the_input_whole():
    assert split_text("a b", "none") == ["a b"]
    assert split_text("", "none") == []


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_pieces_cover_the_text(text):
    assert "".join(split_text(text, "gpt2")) == text


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_pieces_cover_any_bytes(data):
    assert b"".join(split_bytes(data, "gpt2")) == data
