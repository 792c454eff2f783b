"""The byte tokenizer: one id per distinct byte of the training corpus."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from riftco.text.base import Tokenizer
from riftco.text.chat import DEFAULT_CHAT_TEMPLATE, ChatTemplate
from riftco.text.corpus import corpus_bytes
from riftco.text.errors import EncodeError, StateError
from riftco.text.special import DEFAULT_SPECIAL_TOKENS, END_OF_TEXT

_ALL_BYTES = bytes(range(256))


class ByteTokenizer(Tokenizer):
    """Id ``k`` is the ``k``-th smallest byte of the corpus; special ids follow."""

    method = "byte"

    def __init__(
        self,
        byte_vocab: bytes | Sequence[int],
        *,
        special_tokens: Sequence[str] = (),
        eos_token: str | None = None,
        chat_template: ChatTemplate | None = None,
    ) -> None:
        vocab = check_byte_vocab(byte_vocab)
        self._vocab = vocab
        self._to_id = _ALL_BYTES.maketrans(vocab, bytes(range(len(vocab))))
        self._unknown = bytes(sorted(set(_ALL_BYTES) - set(vocab)))
        super().__init__(len(vocab), special_tokens, eos_token, chat_template)

    @classmethod
    def train(
        cls,
        corpus: str | bytes,
        *,
        special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
        eos_token: str | None = END_OF_TEXT,
        chat_template: ChatTemplate | None = DEFAULT_CHAT_TEMPLATE,
    ) -> ByteTokenizer:
        """The distinct bytes of ``corpus`` (UTF-8 if it is text), in ascending order."""
        data = corpus_bytes(corpus)
        return cls(
            bytes(sorted(set(data))),
            special_tokens=special_tokens,
            eos_token=eos_token,
            chat_template=chat_template,
        )

    @property
    def byte_vocab(self) -> bytes:
        """The bytes of ids ``0 .. len - 1``, ascending."""
        return self._vocab

    def _encode(self, data: bytes, offset: int) -> list[int]:
        if self._unknown and data.translate(None, self._vocab):
            position = next(k for k, b in enumerate(data) if b in self._unknown)
            raise EncodeError(
                f"byte 0x{data[position]:02x} at byte offset {offset + position} is not in the "
                f"vocabulary (the {len(self._vocab)} bytes of the training corpus)"
            )
        return list(data.translate(self._to_id))

    def _base_bytes(self) -> list[bytes]:
        return [bytes([b]) for b in self._vocab]

    def _body_state(self) -> dict[str, Any]:
        return {"options": {}, "byte_vocab": list(self._vocab)}


def check_byte_vocab(byte_vocab: bytes | Sequence[int]) -> bytes:
    """Validate a byte vocabulary: 1 to 256 distinct bytes, strictly ascending."""
    try:
        values = list(byte_vocab)
        vocab = bytes(values)
    except (TypeError, ValueError):
        raise StateError("byte_vocab: expected a sequence of integers in [0, 256)") from None
    if any(isinstance(v, bool) for v in values):
        raise StateError("byte_vocab: expected integers; found a boolean")
    if not vocab:
        raise StateError("byte_vocab: expected at least one byte; found none")
    if any(a >= b for a, b in pairwise(vocab)):
        raise StateError(f"byte_vocab: expected strictly ascending bytes; found {list(vocab)}")
    return vocab
