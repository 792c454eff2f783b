"""From text and conversations to token ids: fitting the tokenizer, encoding documents,
and encoding conversations with their loss weights.

Conversations longer than the context: a training row holds ``context + 1`` tokens.
With ``overlong="truncate"`` (the default) a longer conversation keeps its first
``context + 1`` tokens, and is dropped if no response token is left among them;
``"drop"`` drops every longer conversation; ``"error"`` raises ``DataError`` naming
the first one (and its line). ``EncodedExamples.truncated`` and ``.dropped`` count them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from riftco.text import BpeTokenizer, ByteTokenizer, Tokenizer, TokenizerError
from riftco.train.corpus import TextCorpus
from riftco.train.errors import DataError
from riftco.train.instructions import ChatExample

TOKENIZERS = ("bpe", "byte")
LOSS_ON = ("response", "all")
OVERLONG = ("truncate", "drop", "error")


def fit_tokenizer(kind: str, train: TextCorpus, vocab_size: int = 512) -> Tokenizer:
    """A tokenizer fitted on the training split only: ``byte`` (the bytes it contains)
    or ``bpe`` (byte-level BPE with GPT-2's pre-tokenization, ``vocab_size`` ids
    before the special tokens)."""
    text = train.text()
    if not text:
        raise DataError(f"{train.source}: no training text to fit a tokenizer on")
    if kind == "byte":
        return ByteTokenizer.train(text)
    if kind == "bpe":
        return BpeTokenizer.train(text, vocab_size=vocab_size, pretokenize="gpt2")
    raise ValueError(f"tokenizer must be one of {TOKENIZERS}, found {kind!r}")


def known_text(tokenizer: Tokenizer, text: str) -> str:
    """``text`` without the characters a byte tokenizer cannot encode (bytes its
    training split never held); any other tokenizer encodes everything."""
    if not isinstance(tokenizer, ByteTokenizer):
        return text
    known = set(tokenizer.byte_vocab)
    return "".join(c for c in text if all(b in known for b in c.encode("utf-8")))


def encode_text(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text``'s ids; characters a byte tokenizer never saw are left out rather than
    refused (a validation split may hold characters the training split lacks)."""
    return tokenizer.encode(known_text(tokenizer, text))


def encode_documents(tokenizer: Tokenizer, corpus: TextCorpus) -> list[np.ndarray]:
    """Each document's ids followed by the end-of-text id."""
    eos = tokenizer.eos_id
    return [
        np.array([*encode_text(tokenizer, d.text), eos], dtype=np.int64) for d in corpus.documents
    ]


def token_stream(documents: Sequence[np.ndarray]) -> np.ndarray:
    """The documents' ids end to end (each already ends with end-of-text)."""
    if not documents:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(list(documents)).astype(np.int64, copy=False)


@dataclass(frozen=True)
class EncodedExamples:
    """Conversations as ids with per-token loss weights (1 where the token is learned)."""

    sequences: list[np.ndarray]
    weights: list[np.ndarray]
    truncated: int
    dropped: int

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.sequences)


def encode_examples(
    tokenizer: Tokenizer,
    examples: Sequence[ChatExample],
    context: int,
    *,
    loss_on: str = "response",
    overlong: str = "truncate",
    source: str = "<examples>",
    allow_empty: bool = False,
) -> EncodedExamples:
    """Render each conversation with the tokenizer's chat template and weigh its tokens:
    the assistant's content and end marker (``loss_on="response"``) or every token
    (``"all"``). See the module docstring for conversations longer than the context.
    No usable conversation at all raises ``DataError`` unless ``allow_empty``."""
    if loss_on not in LOSS_ON:
        raise ValueError(f"loss_on must be one of {LOSS_ON}, found {loss_on!r}")
    if overlong not in OVERLONG:
        raise ValueError(f"overlong must be one of {OVERLONG}, found {overlong!r}")
    sequences, weights, truncated, dropped = [], [], 0, 0
    limit = context + 1
    for index, example in enumerate(examples):
        where = "" if example.line is not None else f"example {index}: "
        messages = [
            {"role": m["role"], "content": known_text(tokenizer, m["content"])}
            for m in example.as_dicts()
        ]
        try:
            encoding = tokenizer.apply_chat_template(messages)
        except TokenizerError as exc:
            raise DataError(f"{where}{exc}", source, example.line) from None
        ids = np.array(encoding.ids, dtype=np.int64)
        mask = np.array(encoding.assistant_mask, dtype=np.float32)
        if loss_on == "all":
            mask = np.ones_like(mask)
        if len(ids) > limit:
            if overlong == "error":
                raise DataError(
                    f"{where}{len(ids)} tokens, longer than the context of {context} + 1 "
                    "(use overlong 'truncate' or 'drop')",
                    source,
                    example.line,
                )
            if overlong == "drop" or not mask[1:limit].any():
                dropped += 1
                continue
            ids, mask = ids[:limit], mask[:limit]
            truncated += 1
        sequences.append(ids)
        weights.append(mask)
    if not sequences and not allow_empty:
        raise DataError(
            f"no usable examples: {dropped} of {len(examples)} were longer than the context "
            f"({context} tokens) with no response token inside it",
            source,
        )
    return EncodedExamples(sequences, weights, truncated, dropped)


__all__ = [
    "LOSS_ON",
    "OVERLONG",
    "TOKENIZERS",
    "EncodedExamples",
    "encode_documents",
    "encode_examples",
    "encode_text",
    "fit_tokenizer",
    "known_text",
    "token_stream",
]
