"""The fast trainer and encoder against a naive recount-every-merge reference."""

from collections import Counter
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from riftco.text import BpeTokenizer
from riftco.text.pretokenize import split_bytes

SETTINGS = settings(max_examples=150, deadline=None)


def merge_all(seq: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and (seq[i], seq[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def naive_train(data: bytes, vocab_size: int, min_freq: int, mode: str) -> list[tuple[int, int]]:
    seqs = [list(piece) for piece in split_bytes(data, mode)]
    merges: list[tuple[int, int]] = []
    while 256 + len(merges) < vocab_size:
        counts = Counter(p for seq in seqs for p in pairwise(seq))
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < min_freq:
            break
        seqs = [merge_all(seq, best, 256 + len(merges)) for seq in seqs]
        merges.append(best)
    return merges


def naive_encode(data: bytes, merges: list[tuple[int, int]], mode: str) -> list[int]:
    ids: list[int] = []
    for piece in split_bytes(data, mode):
        seq = list(piece)
        for k, pair in enumerate(merges):
            seq = merge_all(seq, pair, 256 + k)
        ids += seq
    return ids


# few letters make ties and runs ("aaaa") common; wider alphabets exercise the rest
corpora = st.one_of(
    st.text(alphabet="ab", min_size=1, max_size=60),
    st.text(alphabet="abc ", min_size=1, max_size=120),
    st.text(alphabet="ab c\n1.é", min_size=1, max_size=200),
    st.binary(min_size=1, max_size=120),
)
modes = st.sampled_from(["none", "gpt2"])


def as_bytes(corpus: str | bytes) -> bytes:
    return corpus.encode() if isinstance(corpus, str) else corpus


@SETTINGS
@given(corpora, st.integers(256, 320), st.integers(1, 3), modes)
def test_training_matches_reference(corpus, vocab_size, min_freq, mode):
    tok = BpeTokenizer.train(corpus, vocab_size, min_freq, mode)
    assert tok.merges == naive_train(as_bytes(corpus), vocab_size, min_freq, mode)


@SETTINGS
@given(corpora, corpora, st.integers(256, 320), modes)
def test_encoding_matches_reference(corpus, text, vocab_size, mode):
    tok = BpeTokenizer.train(corpus, vocab_size, 1, mode)
    data = as_bytes(text)
    assert tok.encode_bytes(data) == naive_encode(data, tok.merges, mode)


@SETTINGS
@given(st.text(alphabet="ab", min_size=1, max_size=40), st.integers(1, 50))
def test_encoding_runs_matches_reference(corpus, run):
    tok = BpeTokenizer.train(corpus, 300, 1)
    data = b"a" * run + b"b" + b"ab" * run
    assert tok.encode_bytes(data) == naive_encode(data, tok.merges, "none")


def test_reference_vectors_agree_with_naive():
    assert naive_train(b"abababab", 258, 2, "none") == [(97, 98), (256, 256)]
    assert naive_encode(b"aaaaa", [(97, 97)], "none") == [256, 256, 97]


def test_documentation_text_matches_reference():
    import pydoc_data.topics

    text = "".join(pydoc_data.topics.topics.values()).encode()
    corpus, held_out = text[:6000], text[50000:56000]
    for mode in ("none", "gpt2"):
        tok = BpeTokenizer.train(corpus, 400, 2, mode)
        assert tok.merges == naive_train(corpus, 400, 2, mode)
        assert tok.encode_bytes(held_out) == naive_encode(held_out, tok.merges, mode)
