"""riftco.text.grammar: constrained decoding for structured output and tool calls.

A JSON Schema (a documented subset) or ``None`` (any JSON object) compiles to a
byte-level pushdown automaton; :class:`TokenGrammar` masks a tokenizer's
vocabulary with it. A sampler uses a :class:`GrammarState` as its constraint:
``allowed()`` (a numpy bool mask of the vocabulary) and ``advance(token_id)``.
Needs numpy (the ``grammar`` extra of riftco-text).
"""

from riftco.text.grammar.errors import (
    GrammarError,
    GrammarLimitError,
    SchemaError,
    TokenNotAllowed,
    ToolCallError,
)
from riftco.text.grammar.schema import GrammarLimits
from riftco.text.grammar.tokens import DEFAULT_MAX_WHITESPACE, GrammarState, TokenGrammar

__all__ = [
    "DEFAULT_MAX_WHITESPACE",
    "GrammarError",
    "GrammarLimitError",
    "GrammarLimits",
    "GrammarState",
    "SchemaError",
    "TokenGrammar",
    "TokenNotAllowed",
    "ToolCallError",
]
