"""The training corpus as bytes."""

from __future__ import annotations

from riftco.text.errors import TrainingError


def corpus_bytes(corpus: str | bytes) -> bytes:
    """``corpus`` as bytes (UTF-8 if it is text); an empty corpus is an error."""
    if isinstance(corpus, str):
        try:
            data = corpus.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TrainingError(
                f"expected a corpus that UTF-8 can encode; found an unpaired surrogate at "
                f"index {exc.start}"
            ) from None
    elif isinstance(corpus, (bytes, bytearray, memoryview)):
        data = bytes(corpus)
    else:
        raise TrainingError(f"expected a str or bytes corpus; found {type(corpus).__name__}")
    if not data:
        raise TrainingError("expected a non-empty corpus; found 0 bytes")
    return data
