"""Text corpora: a file, a folder of ``.txt`` files, or the embedded default.

The embedded default is the Python documentation topics that ship with CPython
(``pydoc_data.topics``): 79 sections of the language reference, about 465 KB
of English. A corpus is a tuple of documents; windows that must not cross a
boundary stop at a document's end.

The train/validation split is deterministic and needs no seed: each document
gives its last ``validation_fraction`` (cut at a line break) to validation and
the rest to training, so both halves sample every document.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from riftco.core import read_bounded
from riftco.train.errors import DataError

DEFAULT_CORPUS = "pydoc_data.topics"
"""The name the embedded default corpus goes by in logs and fingerprints."""

MAX_CORPUS_BYTES = 1 << 30


@dataclass(frozen=True)
class Document:
    """One unit of text: a file, or one documentation topic."""

    name: str
    text: str


@dataclass(frozen=True)
class TextCorpus:
    """Named documents, in a fixed order (sorted topic names or relative paths)."""

    source: str
    documents: tuple[Document, ...]

    @property
    def characters(self) -> int:
        return sum(len(d.text) for d in self.documents)

    def text(self) -> str:
        """Every document, concatenated in order."""
        return "".join(d.text for d in self.documents)


def default_corpus() -> TextCorpus:
    """CPython's ``pydoc_data.topics``, one document per topic, in sorted order."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions strip it
        raise DataError(
            f"the embedded default corpus needs CPython's pydoc_data.topics ({exc}); "
            "pass a text file or a folder of .txt files instead"
        ) from None
    documents = tuple(Document(name, topics[name]) for name in sorted(topics))
    return TextCorpus(DEFAULT_CORPUS, documents)


def load_text(source: str | os.PathLike[str] | None = None) -> TextCorpus:
    """A corpus from a UTF-8 file, a folder of ``.txt`` files (recursively), or the default.

    Raises ``DataError`` naming the file for a missing path, an empty file, an empty
    folder, or bytes that are not UTF-8.
    """
    if source is None:
        return default_corpus()
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise DataError("expected a folder holding .txt files; found none", str(path))
        documents = tuple(
            Document(p.relative_to(path).as_posix(), read_text_file(p)) for p in files
        )
        return TextCorpus(str(path), documents)
    if not path.exists():
        raise DataError("no such file or folder", str(path))
    return TextCorpus(str(path), (Document(path.name, read_text_file(path)),))


def read_text_file(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of ``path``; an empty or undecodable file raises ``DataError``."""
    path = Path(path)
    data = read_bounded(path, MAX_CORPUS_BYTES, DataError)
    if not data.strip():
        raise DataError("expected text; the file is empty", str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(
            f"expected UTF-8; found byte {data[exc.start]:#04x} at offset {exc.start}",
            str(path),
            line,
        ) from None
    return text.removeprefix("\ufeff")


def split_corpus(
    corpus: TextCorpus, validation_fraction: float = 0.1
) -> tuple[TextCorpus, TextCorpus]:
    """``(train, validation)``: each document's tail goes to validation, cut at a line break.

    A document too short to cut (no line break near the cut) stays whole in training.
    ``validation_fraction=0`` gives an empty validation corpus.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must lie in [0, 1), found {validation_fraction!r}")
    train, validation = [], []
    for doc in corpus.documents:
        cut = _cut_point(doc.text, validation_fraction)
        if cut > 0:
            train.append(Document(doc.name, doc.text[:cut]))
        if cut < len(doc.text):
            validation.append(Document(doc.name, doc.text[cut:]))
    return (
        TextCorpus(corpus.source, tuple(train)),
        TextCorpus(corpus.source + " (validation)", tuple(validation)),
    )


def _cut_point(text: str, fraction: float) -> int:
    if fraction == 0.0:
        return len(text)
    target = int(len(text) * (1.0 - fraction))
    before = text.rfind("\n", 0, target)
    cut = before + 1 if before >= 0 else text.find("\n", target) + 1
    return cut if 0 < cut < len(text) else len(text)


__all__ = [
    "DEFAULT_CORPUS",
    "Document",
    "TextCorpus",
    "default_corpus",
    "load_text",
    "read_text_file",
    "split_corpus",
]
