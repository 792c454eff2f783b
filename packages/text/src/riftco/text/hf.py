"""Export to a Hugging Face ``tokenizer.json`` (byte-level BPE) with the same ids.

Bytes map to characters through the GPT-2 bytes-to-unicode table; ``vocab`` maps
each token's characters to our id and ``merges`` lists the pairs in rank order.
Pre-tokenization ``none`` becomes a ``ByteLevel`` pre-tokenizer that does not
split (``use_regex: false``); ``gpt2`` becomes ``ByteLevel`` with the GPT-2
regex, which agrees with ours except on the characters listed in
:mod:`riftco.text.pretokenize`. Special tokens go to ``added_tokens`` with
``special: true``. The ``tokenizers`` library always recognises added tokens in
text, which matches ``encode(text, allow_special=True)``. A byte tokenizer
exports as a BPE model without merges over its bytes.

A vocabulary maps strings to ids, so two ids with the same bytes (BPE can learn
the same string through two different merge paths) cannot be exported.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from riftco.text.base import Tokenizer
from riftco.text.bpe import BpeTokenizer
from riftco.text.byte import ByteTokenizer
from riftco.text.errors import ExportError
from riftco.text.state import write_json_atomic


@cache
def bytes_to_unicode() -> tuple[str, ...]:
    """GPT-2's printable character for each byte value."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


def to_hf_tokenizer_json(tokenizer: Tokenizer) -> dict[str, Any]:
    """The ``tokenizer.json`` document for ``tokenizer``."""
    chars = bytes_to_unicode()
    vocab: dict[str, int] = {}
    for token_id in range(tokenizer.base_vocab_size):
        text = "".join(chars[b] for b in tokenizer.token_bytes(token_id))
        if text in vocab:
            raise ExportError(
                f"expected distinct tokens; ids {vocab[text]} and {token_id} both stand for "
                f"{tokenizer.token_bytes(token_id)!r}, which tokenizer.json cannot represent"
            )
        vocab[text] = token_id
    names = list(vocab)
    if isinstance(tokenizer, BpeTokenizer):
        merges = [f"{names[left]} {names[right]}" for left, right in tokenizer.merges]
        use_regex = tokenizer.pretokenize == "gpt2"
    elif isinstance(tokenizer, ByteTokenizer):
        merges, use_regex = [], False
    else:
        raise ExportError(
            f"expected a BpeTokenizer or ByteTokenizer; found {type(tokenizer).__name__}"
        )
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": use_regex,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": token_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for content, token_id in tokenizer.special_tokens.items()
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def save_hf_tokenizer_json(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    """Write :func:`to_hf_tokenizer_json` to ``path`` atomically."""
    write_json_atomic(to_hf_tokenizer_json(tokenizer), path)
