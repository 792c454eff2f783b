"""Exact save and restore: the tokenizer state as one JSON document.

``tokenizer_from_state`` checks everything before building: the format name and
version, the keys present, the merges (each joins earlier ids, results are
sequential), the byte vocabulary, the special tokens (ids follow the ordinary
ones, in order), the end-of-text token and the chat template, and the sizes
(at most ``MAX_VOCAB_SIZE`` ids). Errors name the field and what was found.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, TypeGuard

from riftco.core import JSONError, loads_strict, read_bounded, write_bytes_atomic
from riftco.text.base import FORMAT, FORMAT_VERSION, MAX_VOCAB_SIZE, Tokenizer
from riftco.text.bpe import BpeTokenizer
from riftco.text.bpe_train import NUM_BYTES
from riftco.text.byte import ByteTokenizer, check_byte_vocab
from riftco.text.chat import ChatTemplate
from riftco.text.errors import StateError, TokenizerError
from riftco.text.special import MAX_SPECIAL_TOKENS

_COMMON = {
    "format",
    "format_version",
    "method",
    "options",
    "special_tokens",
    "eos_token",
    "chat_template",
}
#: Largest tokenizer state file :func:`load` reads.
MAX_STATE_BYTES = 1 << 28

_BODY = {"bpe": {"merges"}, "byte": {"byte_vocab"}}
_OPTIONS = {"bpe": {"pretokenize"}, "byte": set()}


def tokenizer_from_state(state: Mapping[str, Any]) -> Tokenizer:
    """Rebuild the tokenizer that ``to_state`` described, exactly."""
    if not isinstance(state, Mapping):
        raise StateError(f"expected a JSON object; found {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise StateError(f"format: expected {FORMAT!r}; found {state.get('format')!r}")
    version = state.get("format_version")
    if not _is_int(version) or not 1 <= version <= FORMAT_VERSION:
        raise StateError(
            f"format_version: expected an integer from 1 to {FORMAT_VERSION}; found {version!r}"
            + (
                " (written by a newer riftco-text)"
                if _is_int(version) and version > FORMAT_VERSION
                else ""
            )
        )
    method = state.get("method")
    if not isinstance(method, str) or method not in _BODY:
        raise StateError(f"method: expected one of {sorted(_BODY)}; found {method!r}")
    _check_keys("the state", state, _COMMON | _BODY[method])
    options = state["options"]
    if not isinstance(options, Mapping):
        raise StateError(f"options: expected an object; found {type(options).__name__}")
    _check_keys("options", options, _OPTIONS[method])
    template = state["chat_template"]
    try:
        chat_template = None if template is None else ChatTemplate.from_state(template)
        if method == "bpe":
            merges = _merges(state["merges"])
            specials = _special_tokens(state["special_tokens"], NUM_BYTES + len(merges))
            return BpeTokenizer(
                merges,
                pretokenize=options["pretokenize"],
                special_tokens=specials,
                eos_token=state["eos_token"],
                chat_template=chat_template,
            )
        vocab = state["byte_vocab"]
        if not isinstance(vocab, list):
            raise StateError(f"byte_vocab: expected a list; found {type(vocab).__name__}")
        vocab = check_byte_vocab(vocab)
        specials = _special_tokens(state["special_tokens"], len(vocab))
        return ByteTokenizer(
            vocab,
            special_tokens=specials,
            eos_token=state["eos_token"],
            chat_template=chat_template,
        )
    except StateError:
        raise
    except TokenizerError as exc:
        raise StateError(f"{type(exc).__name__}: {exc}") from exc
    except (TypeError, KeyError, AttributeError) as exc:  # a field of the wrong JSON type
        raise StateError(f"a field of the wrong type ({type(exc).__name__}: {exc})") from None


def save(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    """Write ``tokenizer.to_state()`` to ``path`` atomically (temp file, fsync, rename)."""
    write_json_atomic(tokenizer.to_state(), path)


def load(path: str | os.PathLike[str]) -> Tokenizer:
    """Read a state written by :func:`save`, validating it."""
    raw = read_bounded(path, MAX_STATE_BYTES, StateError)  # a FIFO or /dev/zero is refused
    try:
        state = loads_strict(raw)
    except JSONError as exc:
        raise StateError(f"{path}: {exc}") from None
    try:
        return tokenizer_from_state(state)
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from None


def write_json_atomic(document: Any, path: str | os.PathLike[str]) -> None:
    """Write JSON so that ``path`` holds either the old file or the whole new one."""
    write_bytes_atomic(path, json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8"))


def _merges(merges: Any) -> list[tuple[int, int]]:
    if not isinstance(merges, list):
        raise StateError(f"merges: expected a list; found {type(merges).__name__}")
    if len(merges) > MAX_VOCAB_SIZE - NUM_BYTES:
        raise StateError(
            f"merges: expected at most {MAX_VOCAB_SIZE - NUM_BYTES}; found {len(merges)}"
        )
    pairs = []
    for k, merge in enumerate(merges):
        new = NUM_BYTES + k
        if not (isinstance(merge, list) and len(merge) == 3 and all(map(_is_int, merge))):
            raise StateError(f"merges[{k}]: expected [left, right, id] integers; found {merge!r}")
        left, right, result = merge
        if result != new:
            raise StateError(
                f"merges[{k}]: expected result id {new} (results are sequential); found {result}"
            )
        if not (0 <= left < new and 0 <= right < new):
            raise StateError(
                f"merges[{k}]: expected operands that are earlier ids in [0, {new}); "
                f"found {left}, {right}"
            )
        pairs.append((left, right))
    return pairs


def _special_tokens(entries: Any, first_id: int) -> list[str]:
    if not isinstance(entries, list):
        raise StateError(f"special_tokens: expected a list; found {type(entries).__name__}")
    if len(entries) > MAX_SPECIAL_TOKENS:
        raise StateError(
            f"special_tokens: expected at most {MAX_SPECIAL_TOKENS}; found {len(entries)}"
        )
    tokens = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or set(entry) != {"id", "content"}:
            raise StateError(f"special_tokens[{k}]: expected {{id, content}}; found {entry!r}")
        if entry["id"] != first_id + k or not _is_int(entry["id"]):
            raise StateError(
                f"special_tokens[{k}]: expected id {first_id + k} (right after the ordinary ids, "
                f"in order); found {entry['id']!r}"
            )
        tokens.append(entry["content"])
    return tokens


def _check_keys(where: str, found: Mapping[str, Any], expected: set[str]) -> None:
    missing, unexpected = expected - set(found), set(found) - expected
    if missing or unexpected:
        raise StateError(
            f"{where}: missing keys {sorted(missing)}, unexpected keys {sorted(map(str, unexpected))}"
        )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
