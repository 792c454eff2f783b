"""Typed errors: each says what was expected, what was found, and where."""

from __future__ import annotations

from riftco.core.errors import RiftcoError


class TokenizerError(RiftcoError, ValueError):
    """Base class of every error raised by riftco.text (a ``RiftcoError``)."""


class TrainingError(TokenizerError):
    """Training was asked for something impossible (an empty corpus, a bad limit)."""


class EncodeError(TokenizerError):
    """Input that the tokenizer cannot represent (a byte outside its vocabulary)."""


class DecodeError(TokenizerError):
    """An id outside the vocabulary."""


class SpecialTokenError(TokenizerError):
    """A bad special-token list, or a special token the tokenizer does not have."""


class ChatTemplateError(TokenizerError):
    """A malformed chat template or chat message."""


class StateError(TokenizerError):
    """A saved tokenizer state that is malformed or inconsistent."""


class ExportError(TokenizerError):
    """A tokenizer that cannot be written in the requested foreign format."""
