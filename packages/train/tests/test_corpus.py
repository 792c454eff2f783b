import pytest

from riftco.train.corpus import DEFAULT_CORPUS, load_text, split_corpus
from riftco.train.errors import DataError


def test_default_corpus_is_the_pydoc_topics():
    corpus = load_text()
    assert corpus.source == DEFAULT_CORPUS
    assert len(corpus.documents) >= 70
    assert corpus.characters > 300_000
    names = [d.name for d in corpus.documents]
    assert names == sorted(names) and "if" in names


def test_split_is_deterministic_disjoint_and_complete():
    corpus = load_text()
    train, validation = split_corpus(corpus, 0.1)
    assert split_corpus(corpus, 0.1) == (train, validation)
    assert train.characters + validation.characters == corpus.characters
    assert 0.07 < validation.characters / corpus.characters < 0.13
    by_name = {d.name: d.text for d in corpus.documents}
    for doc in validation.documents:
        head = next(d.text for d in train.documents if d.name == doc.name)
        assert head + doc.text == by_name[doc.name]
        assert head.endswith("\n")


def test_no_validation():
    train, validation = split_corpus(load_text(), 0.0)
    assert validation.documents == () and train.characters == load_text().characters


def test_file_and_folder(tmp_path):
    (tmp_path / "b.txt").write_text("second file\nline two\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("nested\n")
    (tmp_path / "ignored.md").write_text("not text")
    corpus = load_text(tmp_path)
    assert [d.name for d in corpus.documents] == ["b.txt", "sub/a.txt"]
    single = load_text(tmp_path / "b.txt")
    assert single.text() == "second file\nline two\n"


def test_bad_text_names_the_file(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.txt.*empty"):
        load_text(empty)
    with pytest.raises(DataError, match="no such file"):
        load_text(tmp_path / "missing.txt")
    binary = tmp_path / "bad.txt"
    binary.write_bytes(b"ok\n\xff\xfe")
    with pytest.raises(DataError, match=r"bad.txt:2: expected UTF-8"):
        load_text(binary)
    folder = tmp_path / "none"
    folder.mkdir()
    with pytest.raises(DataError, match="found none"):
        load_text(folder)
