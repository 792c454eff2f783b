"""Typed errors of the structured-output engine."""

from __future__ import annotations

from riftco.text.errors import TokenizerError


class GrammarError(TokenizerError):
    """Base class of the grammar errors (a ``TokenizerError``, so a ``ValueError``)."""


class SchemaError(GrammarError):
    """A JSON schema outside the supported subset, or one that admits no document.

    ``keyword`` names the schema keyword at fault (``None`` when no single one is),
    ``path`` the JSON pointer of the schema object where it was found. A server
    answers it with a 400.
    """

    def __init__(self, message: str, *, keyword: str | None = None, path: str = "#") -> None:
        super().__init__(f"schema {path}: {message}")
        self.message = message
        self.keyword = keyword
        self.path = path


class GrammarLimitError(SchemaError):
    """A schema larger or deeper than the :class:`GrammarLimits` allow."""


class TokenNotAllowed(GrammarError):
    """``advance`` was given a token the grammar does not allow in this state."""


class ToolCallError(GrammarError):
    """A malformed tools list or tool choice, or a chat template without tool-call syntax."""
