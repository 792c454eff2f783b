import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text import BpeTokenizer, DecodeError, EncodeError, TrainingError

SETTINGS = settings(max_examples=100, deadline=None)


def test_reference_vectors():
    tok = BpeTokenizer.train("abababab", vocab_size=258)
    assert tok.merges == [(97, 98), (256, 256)]
    assert tok.encode("abababab") == [257, 257]
    tok = BpeTokenizer.train("aaaaa", vocab_size=257)
    assert tok.merges == [(97, 97)]
    assert tok.encode("aaaaa") == [256, 256, 97]


def test_overlapping_pairs_are_counted():
    # "aaa" has two overlapping (a, a) pairs: enough for the default minimum of 2
    assert BpeTokenizer.train("aaa", vocab_size=257).merges == [(97, 97)]


def test_ties_go_to_the_smallest_pair():
    # (a, b) and (c, d) both occur twice, everything else once; (a, b) is the smaller
    tok = BpeTokenizer.train("abab cdcd", vocab_size=257, min_pair_frequency=1)
    assert tok.merges == [(97, 98)]


def test_stops_below_min_pair_frequency():
    assert BpeTokenizer.train("abcd", vocab_size=300).merges == []
    assert len(BpeTokenizer.train("abcd", vocab_size=300, min_pair_frequency=1).merges) == 3


def test_stops_at_vocab_size():
    tok = BpeTokenizer.train("the cat sat on the mat " * 20, vocab_size=260)
    assert len(tok.merges) == 4
    assert tok.base_vocab_size == 260
    assert tok.vocab_size == 260 + len(tok.special_tokens)


def test_merges_apply_in_learned_order():
    # merge 0 is (b, c); encoding "abc" must not use a later (a, b)
    tok = BpeTokenizer([(98, 99), (97, 98)])
    assert tok.encode("abc") == [97, 256]
    assert tok.encode("abbc") == [257, 256]


def test_gpt2_merges_never_cross_words():
    corpus = "ab ab ab ab ab"
    none = BpeTokenizer.train(corpus, vocab_size=300, pretokenize="none")
    gpt2 = BpeTokenizer.train(corpus, vocab_size=300, pretokenize="gpt2")
    assert any(b" " in none.token_bytes(i)[1:] for i in range(256, none.base_vocab_size))
    for token_id in range(256, gpt2.base_vocab_size):
        assert b" " not in gpt2.token_bytes(token_id)[1:]
    assert gpt2.encode(" ab ab") == [gpt2.encode(" ab")[0]] * 2


def test_decoding_is_exact_for_any_bytes():
    tok = BpeTokenizer.train(bytes(range(256)) * 3, vocab_size=300)
    data = b"\xff\xfe\x80abc\xc3"
    assert tok.decode_bytes(tok.encode_bytes(data)) == data
    assert tok.decode(tok.encode_bytes(data)) == data.decode("utf-8", "replace")


def test_decode_rejects_bad_ids():
    tok = BpeTokenizer.train("abab", vocab_size=257)
    with pytest.raises(DecodeError, match=r"found 999 at position 1"):
        tok.decode([97, 999])
    with pytest.raises(DecodeError, match=r"found -1 at position 0"):
        tok.decode([-1])
    with pytest.raises(DecodeError, match=r"found str at position 0"):
        tok.decode(["a"])


def test_training_rejects_bad_arguments():
    with pytest.raises(TrainingError, match="non-empty corpus"):
        BpeTokenizer.train("")
    with pytest.raises(TrainingError, match="vocab_size to be an integer >= 256; found 10"):
        BpeTokenizer.train("abc", vocab_size=10)
    with pytest.raises(TrainingError, match="min_pair_frequency"):
        BpeTokenizer.train("abc", min_pair_frequency=0)
    with pytest.raises(TrainingError, match="pretokenize"):
        BpeTokenizer.train("abc", pretokenize="words")
    with pytest.raises(TrainingError, match="str or bytes"):
        BpeTokenizer.train(["abc"])


def test_encode_rejects_unpaired_surrogates():
    tok = BpeTokenizer.train("abab", vocab_size=257)
    with pytest.raises(EncodeError, match="unpaired surrogate"):
        tok.encode("a\ud800")
    with pytest.raises(EncodeError, match="expected str"):
        tok.encode(b"ab")


tokenizers = {
    mode: BpeTokenizer.train("the quick brown fox, the lazy dog; 123 élan " * 5, 330, 2, mode)
    for mode in ("none", "gpt2")
}


@SETTINGS
@given(st.text(), st.sampled_from(["none", "gpt2"]))
def test_text_round_trip(text, mode):
    tok = tokenizers[mode]
    assert tok.decode(tok.encode(text)) == text


@SETTINGS
@given(st.binary(), st.sampled_from(["none", "gpt2"]))
def test_bytes_round_trip(data, mode):
    tok = tokenizers[mode]
    assert tok.decode_bytes(tok.encode_bytes(data)) == data


@SETTINGS
@given(st.text(), st.text())
def test_encode_of_text_equals_encode_of_its_bytes(corpus, text):
    tok = tokenizers["gpt2"]
    assert tok.encode(text) == tok.encode_bytes(text.encode())
