"""The byte-level BPE tokenizer: ids 0-255 are bytes, merge ``k`` makes ``256 + k``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from riftco.text.base import MAX_VOCAB_SIZE, Tokenizer
from riftco.text.bpe_encode import BpeEncoder
from riftco.text.bpe_train import NUM_BYTES, train_merges
from riftco.text.chat import DEFAULT_CHAT_TEMPLATE, ChatTemplate
from riftco.text.corpus import corpus_bytes
from riftco.text.errors import StateError, TrainingError
from riftco.text.pretokenize import PRETOKENIZE_MODES, Pretokenize, split_bytes
from riftco.text.special import DEFAULT_SPECIAL_TOKENS, END_OF_TEXT, check_special_tokens


class BpeTokenizer(Tokenizer):
    """Byte-level BPE with deterministic merges and optional GPT-2 pre-tokenization."""

    method = "bpe"

    def __init__(
        self,
        merges: Sequence[tuple[int, int]],
        *,
        pretokenize: Pretokenize = "none",
        special_tokens: Sequence[str] = (),
        eos_token: str | None = None,
        chat_template: ChatTemplate | None = None,
    ) -> None:
        _check_pretokenize(pretokenize, StateError)
        self._encoder = BpeEncoder(check_merges(merges), pretokenize)
        super().__init__(
            NUM_BYTES + len(self._encoder.merges), special_tokens, eos_token, chat_template
        )

    @classmethod
    def train(
        cls,
        corpus: str | bytes,
        vocab_size: int = 512,
        min_pair_frequency: int = 2,
        pretokenize: Pretokenize = "none",
        *,
        special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
        eos_token: str | None = END_OF_TEXT,
        chat_template: ChatTemplate | None = DEFAULT_CHAT_TEMPLATE,
    ) -> BpeTokenizer:
        """Learn merges until ``vocab_size`` ids (bytes and merges; special tokens come on
        top) or until the most frequent pair occurs fewer than ``min_pair_frequency`` times.
        """
        for name, value, low in (
            ("vocab_size", vocab_size, NUM_BYTES),
            ("min_pair_frequency", min_pair_frequency, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise TrainingError(f"expected {name} to be an integer >= {low}; found {value!r}")
        special_tokens = check_special_tokens(special_tokens)
        if vocab_size + len(special_tokens) > MAX_VOCAB_SIZE:
            raise TrainingError(
                f"expected vocab_size + special tokens <= {MAX_VOCAB_SIZE}; found "
                f"{vocab_size} + {len(special_tokens)}"
            )
        _check_pretokenize(pretokenize, TrainingError)
        data = corpus_bytes(corpus)
        chunks = Counter(split_bytes(data, pretokenize)).items()
        merges = train_merges(chunks, vocab_size - NUM_BYTES, min_pair_frequency)
        return cls(
            merges,
            pretokenize=pretokenize,
            special_tokens=special_tokens,
            eos_token=eos_token,
            chat_template=chat_template,
        )

    @property
    def merges(self) -> list[tuple[int, int]]:
        """The learned ``(left, right)`` pairs; pair ``k`` makes id ``256 + k``."""
        return list(self._encoder.merges)

    @property
    def pretokenize(self) -> str:
        return self._encoder.pretokenize

    def _encode(self, data: bytes, offset: int) -> list[int]:
        return self._encoder.encode_bytes(data)

    def _base_bytes(self) -> list[bytes]:
        return list(self._encoder.token_bytes)

    def _body_state(self) -> dict[str, Any]:
        return {
            "options": {"pretokenize": self.pretokenize},
            "merges": [[left, right, NUM_BYTES + k] for k, (left, right) in enumerate(self.merges)],
        }


#: Longest byte string one token may stand for, and the most bytes all tokens may
#: decode to together: chained merges double a token's length, so a state of a few
#: hundred merges could otherwise demand terabytes before anything is read.
MAX_TOKEN_BYTES = 1 << 16
MAX_DECODED_BYTES = 1 << 26


def check_merges(merges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each merge must join two existing ids; at most ``MAX_VOCAB_SIZE - 256`` merges;
    no token longer than ``MAX_TOKEN_BYTES`` and at most ``MAX_DECODED_BYTES`` bytes
    over every token (checked from the lengths alone, before any string is built)."""
    merges = list(merges)
    if len(merges) > MAX_VOCAB_SIZE - NUM_BYTES:
        raise StateError(
            f"expected at most {MAX_VOCAB_SIZE - NUM_BYTES} merges; found {len(merges)}"
        )
    checked = []
    lengths = [1] * NUM_BYTES
    total = NUM_BYTES
    for k, merge in enumerate(merges):
        new = NUM_BYTES + k
        try:
            left, right = merge
        except (TypeError, ValueError):
            raise StateError(f"merge {k}: expected a (left, right) pair; found {merge!r}") from None
        for value in (left, right):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < new:
                raise StateError(
                    f"merge {k} (making id {new}): expected operands that are earlier ids in "
                    f"[0, {new}); found {merge!r}"
                )
        length = lengths[left] + lengths[right]
        total += length
        if length > MAX_TOKEN_BYTES or total > MAX_DECODED_BYTES:
            raise StateError(
                f"merge {k} (making id {new}): expected tokens of at most {MAX_TOKEN_BYTES} "
                f"bytes and at most {MAX_DECODED_BYTES} bytes over all tokens; this merge "
                f"makes a token of {length} bytes and {total} bytes in all"
            )
        lengths.append(length)
        checked.append((left, right))
    return checked


def _check_pretokenize(mode: object, error: type[Exception]) -> None:
    if mode not in PRETOKENIZE_MODES:
        raise error(f"expected pretokenize in {list(PRETOKENIZE_MODES)}; found {mode!r}")
