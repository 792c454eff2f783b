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
from riftco.text.grammar.tokens import (
    DEFAULT_MAX_WHITESPACE,
    GrammarState,
    TokenGrammar,
    Vocabulary,
)
from riftco.text.grammar.tools import (
    ParsedReply,
    Tool,
    check_tools,
    parse_tool_calls,
    template_syntax,
    tool_grammar,
    tools_prompt,
)

__all__ = [
    "DEFAULT_MAX_WHITESPACE",
    "GrammarError",
    "GrammarLimitError",
    "GrammarLimits",
    "GrammarState",
    "ParsedReply",
    "SchemaError",
    "TokenGrammar",
    "TokenNotAllowed",
    "Tool",
    "ToolCallError",
    "Vocabulary",
    "check_tools",
    "parse_tool_calls",
    "template_syntax",
    "tool_grammar",
    "tools_prompt",
]
