"""TextStream: whole characters only, stop strings across tokens, held-back text."""

import pytest

from riftco.serve.text_stream import TextStream

PIECES = {
    0: b"Hel",
    1: b"lo",
    2: b" wo",
    3: b"rld",
    4: "é".encode()[:1],
    5: "é".encode()[1:],
    6: b"<s>",
}


def feed(stream, ids):
    return [stream.push(i) for i in ids] + [stream.finish()]


def test_plain_text_is_released_as_it_comes():
    stream = TextStream(PIECES.__getitem__)
    assert feed(stream, [0, 1, 2, 3]) == ["Hel", "lo", " wo", "rld", ""]


def test_split_utf8_characters_wait_for_their_second_byte():
    stream = TextStream(PIECES.__getitem__)
    assert feed(stream, [0, 4, 5]) == ["Hel", "", "é", ""]


def test_stop_string_across_tokens_is_cut():
    stream = TextStream(PIECES.__getitem__, stop=["o w"])
    out = feed(stream, [0, 1, 2, 3])
    assert "".join(out) == "Hell" and stream.stopped
    assert out[1] == "l"  # "o" is held back: it could start "o w"


def test_held_back_text_is_released_when_the_stop_string_does_not_come():
    stream = TextStream(PIECES.__getitem__, stop=["lox"])
    out = feed(stream, [0, 1])
    assert out == ["He", "l", "lo"] and not stream.stopped


def test_skipped_tokens_add_no_text():
    stream = TextStream(PIECES.__getitem__, skip=frozenset({6}))
    assert "".join(feed(stream, [0, 6, 1])) == "Hello"


@pytest.mark.parametrize(
    ("stop", "text"),
    [(["Hel"], ""), (["H"], ""), (["rld"], "Hello wo"), (["Hello world", "lo w"], "Hel")],
)
def test_the_first_completed_stop_string_wins(stop, text):
    stream = TextStream(PIECES.__getitem__, stop=stop)
    assert "".join(feed(stream, [0, 1, 2, 3])) == text and stream.stopped
