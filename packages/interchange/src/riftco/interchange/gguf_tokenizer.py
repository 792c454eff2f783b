"""The tokenizer section of a GGUF file (``tokenizer.ggml.*``), both ways.

riftco's byte-level BPE is what llama.cpp calls the ``gpt2`` tokenizer model:
tokens are byte strings written with GPT-2's bytes-to-unicode characters, merges
are ``"left right"`` strings in rank order, and special tokens are ``CONTROL``
tokens (matched in text only when special tokens are parsed, as riftco's
``allow_special``). The vocabulary is riftco-text's Hugging Face export, so both
formats hold the same strings; ids past the tokenizer's up to the model's
``vocab_size`` are ``[PAD{id}]`` tokens of type ``UNUSED``.

``tokenizer.ggml.pre`` names the pre-tokenizer llama.cpp runs before BPE:

- ``gpt-2`` for ``pretokenize="gpt2"``: the same splits as riftco's except for
  characters that are numeric but not decimal digits (Unicode Nl and No, such as
  ``²`` or ``Ⅻ``), which riftco groups with letters; the file records this in
  ``riftco.tokenizer.llama_cpp``.
- a byte vocabulary has no merges, so any split gives the same ids: exact.
- BPE with ``pretokenize="none"`` merges across word boundaries, and llama.cpp has
  no pre-tokenizer that leaves text whole: refused, unless the caller accepts the
  mismatch, which the file then records.

The exact riftco state (chat template included) is kept in ``riftco.tokenizer``;
import uses it when it agrees with the llama.cpp section, and otherwise rebuilds
the tokenizer from that section when its ids have riftco's layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riftco.core import loads_strict
from riftco.interchange.errors import ConversionError
from riftco.interchange.hf_tokenizer import STATE_KEY, jinja_chat_template, tokenizer_from_hf_json
from riftco.text import (
    BpeTokenizer,
    SpecialTokenError,
    Tokenizer,
    TokenizerError,
    to_hf_tokenizer_json,
    tokenizer_from_state,
)

MODEL = "tokenizer.ggml.model"
PRE = "tokenizer.ggml.pre"
TOKENS = "tokenizer.ggml.tokens"
TOKEN_TYPES = "tokenizer.ggml.token_type"
MERGES = "tokenizer.ggml.merges"
BOS_ID = "tokenizer.ggml.bos_token_id"
EOS_ID = "tokenizer.ggml.eos_token_id"
ADD_BOS = "tokenizer.ggml.add_bos_token"
ADD_EOS = "tokenizer.ggml.add_eos_token"
CHAT_TEMPLATE = "tokenizer.chat_template"
RIFTCO_STATE = "riftco.tokenizer"
RIFTCO_PARITY = "riftco.tokenizer.llama_cpp"

# llama.cpp's token types (gguf.TokenType).
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5

EXACT = "exact"
GPT2_CAVEAT = (
    "near: characters that are numeric but not decimal digits (Unicode Nl and No) split "
    "as letters in riftco and as numbers in llama.cpp"
)
NO_SPLIT_MISMATCH = (
    "mismatch: riftco merges across word boundaries (pretokenize 'none'); llama.cpp splits "
    "text with the GPT-2 pattern first"
)


@dataclass(frozen=True)
class GgufVocabulary:
    """What a tokenizer becomes in a GGUF file."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    parity: str
    eos_id: int | None
    chat_template: str | None


def gguf_vocabulary(
    tokenizer: Tokenizer, vocab_size: int, allow_mismatch: bool = False
) -> GgufVocabulary:
    """The GGUF tokenizer section for ``tokenizer`` in a model of ``vocab_size`` ids."""
    if tokenizer.vocab_size > vocab_size:
        raise ConversionError(
            f"tokenizer: {tokenizer.vocab_size} ids do not fit the model's vocab_size {vocab_size}"
        )
    try:
        document = to_hf_tokenizer_json(tokenizer)
    except TokenizerError as exc:
        raise ConversionError(f"tokenizer: {exc}") from None
    model = document["model"]
    tokens = [""] * tokenizer.vocab_size
    for text, token_id in model["vocab"].items():
        tokens[token_id] = text
    types = [NORMAL] * tokenizer.base_vocab_size + [CONTROL] * len(tokenizer.special_tokens)
    for content, token_id in tokenizer.special_tokens.items():
        tokens[token_id] = content
    for token_id in range(tokenizer.vocab_size, vocab_size):
        tokens.append(f"[PAD{token_id}]")
        types.append(UNUSED)
    merges = list(model["merges"])
    parity = EXACT
    if merges and isinstance(tokenizer, BpeTokenizer):
        if tokenizer.pretokenize == "gpt2":
            parity = GPT2_CAVEAT
        elif allow_mismatch:
            parity = NO_SPLIT_MISMATCH
        else:
            raise ConversionError(
                "tokenizer: this BPE merges across word boundaries (pretokenize 'none'), and "
                "llama.cpp always splits text with a pre-tokenizer first, so it would encode "
                "text to other ids; pass allow_tokenizer_mismatch=True to export it anyway "
                "(the file then records the mismatch)"
            )
    try:
        eos_id: int | None = tokenizer.eos_id
    except SpecialTokenError:
        eos_id = None
    template = tokenizer.chat_template
    return GgufVocabulary(
        tokens=tokens,
        token_types=types,
        merges=merges,
        pre="gpt-2",
        parity=parity,
        eos_id=eos_id,
        chat_template=None if template is None else jinja_chat_template(template),
    )


def tokenizer_from_gguf(metadata: Mapping[str, Any]) -> Tokenizer:
    """The tokenizer of a GGUF file's metadata; ConversionError when riftco cannot
    represent it exactly."""
    model = metadata.get(MODEL)
    if model != "gpt2":
        kind = "a SentencePiece vocabulary" if model == "llama" else f"model {model!r}"
        raise ConversionError(
            f"{MODEL}: riftco reads byte-level BPE ('gpt2'); found {kind}; "
            "pass the tokenizer explicitly"
        )
    tokens, types, merges = _strings(metadata, TOKENS), _types(metadata), _merges(metadata)
    while tokens and types[-1] == UNUSED and tokens[-1] == f"[PAD{len(tokens) - 1}]":
        tokens.pop()
        types.pop()
    state = _riftco_state(metadata)
    if state is not None and state.vocab_size == len(tokens):
        vocabulary = gguf_vocabulary(state, len(tokens), allow_mismatch=True)
        if (vocabulary.tokens, vocabulary.token_types, vocabulary.merges) == (
            tokens,
            types,
            merges,
        ):
            return state
    return _rebuild(metadata, tokens, types, merges, state)


def _rebuild(
    metadata: Mapping[str, Any],
    tokens: list[str],
    types: list[int],
    merges: list[str],
    state: Tokenizer | None,
) -> Tokenizer:
    pre = metadata.get(PRE, "default")
    if merges and pre != "gpt-2":
        raise ConversionError(
            f"{PRE}: riftco reproduces the 'gpt-2' pre-tokenizer only; found {pre!r}"
        )
    vocab: dict[str, int] = {}
    added = []
    for token_id, (text, kind) in enumerate(zip(tokens, types)):
        if kind == CONTROL:
            added.append({"id": token_id, "content": text, "special": True})
        elif kind == NORMAL and not added:
            vocab[text] = token_id
        else:
            raise ConversionError(
                f"{TOKEN_TYPES}: expected ordinary tokens, then control tokens; "
                f"found type {kind} at id {token_id} ({text!r})"
            )
    document = {
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
        # Without merges, splitting changes nothing: a byte vocabulary.
        "pre_tokenizer": {"type": "ByteLevel", "use_regex": bool(merges)},
        "added_tokens": added,
    }
    config: dict[str, Any] = {}
    eos_id = metadata.get(EOS_ID)
    if isinstance(eos_id, int) and 0 <= eos_id < len(tokens) and types[eos_id] == CONTROL:
        config["eos_token"] = tokens[eos_id]
    if state is not None:
        config[STATE_KEY] = state.to_state()
    try:
        return tokenizer_from_hf_json(document, config)
    except ConversionError as exc:
        raise ConversionError(str(exc).replace("tokenizer.json", "tokenizer.ggml")) from None


def _riftco_state(metadata: Mapping[str, Any]) -> Tokenizer | None:
    raw = metadata.get(RIFTCO_STATE)
    if raw is None:
        return None
    try:
        return tokenizer_from_state(loads_strict(raw))
    except (TypeError, ValueError) as exc:  # JSONError and TokenizerError are ValueErrors
        raise ConversionError(f"{RIFTCO_STATE}: {exc}") from None


def _strings(metadata: Mapping[str, Any], key: str) -> list[str]:
    values = metadata.get(key)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConversionError(f"{key}: expected an array of strings")
    return list(values)


def _types(metadata: Mapping[str, Any]) -> list[int]:
    count = len(metadata.get(TOKENS) or [])
    values = metadata.get(TOKEN_TYPES)
    if values is None:
        return [NORMAL] * count
    if not isinstance(values, list) or len(values) != count:
        raise ConversionError(f"{TOKEN_TYPES}: expected one type per token ({count})")
    return [int(v) for v in values]


def _merges(metadata: Mapping[str, Any]) -> list[str]:
    if MERGES not in metadata:
        raise ConversionError(f"{MERGES}: missing (llama.cpp needs it for a 'gpt2' tokenizer)")
    values = metadata[MERGES]
    if values == []:
        return []
    merges = _strings(metadata, MERGES)
    for k, merge in enumerate(merges):
        if merge.count(" ") != 1 or merge.startswith(" ") or merge.endswith(" "):
            raise ConversionError(f"{MERGES}[{k}]: expected 'left right'; found {merge!r}")
    return merges
