"""Pre-tokenization: how text is cut into pieces that merges never cross.

``none`` keeps the input whole. ``gpt2`` cuts it with the GPT-2 pattern::

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

written for the standard-library ``re`` (:data:`GPT2_PATTERN`), where ``\\s`` is
narrowed to Unicode White_Space (Python's ``\\s`` also matches U+001C..U+001F),
letters are ``[^\\W\\d_]`` and numbers ``\\d``. The one known difference from the
``\\p{...}`` original: characters that Python counts as alphanumeric but that are
not decimal digits (numeric categories Nl and No: ``²``, ``½``, ``Ⅻ``) fall in the
letter class here and in the number class there. Unicode-version differences
between CPython and Rust's ``regex`` crate may add a few more.
"""

from __future__ import annotations

import re
from typing import Literal

Pretokenize = Literal["none", "gpt2"]
PRETOKENIZE_MODES: tuple[str, ...] = ("none", "gpt2")

_WS = r"[^\S\x1c-\x1f]"  # Unicode White_Space
_NOT_WS = r"(?:\S|[\x1c-\x1f])"
_LETTER = r"[^\W\d_]"
_NUMBER = r"\d"
_OTHER = r"(?:[^\s\w]|[_\x1c-\x1f])"  # neither White_Space, letter nor number

GPT2_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d"
    rf"| ?{_LETTER}+| ?{_NUMBER}+| ?{_OTHER}+"
    rf"|{_WS}+(?!{_NOT_WS})|{_WS}+"
)
GPT2_REGEX = re.compile(GPT2_PATTERN)


def split_text(text: str, mode: str) -> list[str]:
    """The pieces of ``text`` under ``mode``; their concatenation is ``text``."""
    if mode == "none":
        return [text] if text else []
    return GPT2_REGEX.findall(text)


def split_bytes(data: bytes, mode: str) -> list[bytes]:
    """The pieces of ``data``; bytes that are not UTF-8 travel as surrogate escapes."""
    if mode == "none":
        return [data] if data else []
    text = data.decode("utf-8", "surrogateescape")
    return [piece.encode("utf-8", "surrogateescape") for piece in GPT2_REGEX.findall(text)]
