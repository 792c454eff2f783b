"""Structured output and tool calls for a request: riftco-text's grammar engine
(`riftco.text.grammar`) compiled once per request, one grammar state per choice.

`JsonOutput` is ``response_format`` (``json_object``: any JSON object; ``json_schema``:
documents valid against the schema); `ToolCalls` is ``tools`` with ``tool_choice``.
Both are constraint factories: `prepare` compiles the grammar for a tokenizer (the
server runs it off the event loop; a refused schema or a template without a tool-call
syntax is a `RequestError`, 400), and calling the factory gives a fresh state (riftco-nn's
``Constraint``: ``allowed()``, ``advance(id)``) for one choice.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from riftco.serve.errors import RequestError
from riftco.text.grammar import (
    GrammarError,
    SchemaError,
    TokenGrammar,
    ToolCallError,
    parse_tool_calls,
    template_syntax,
    tool_grammar,
    tools_prompt,
)


class _Compiled:
    """A grammar compiled once for one tokenizer, shared by a request's choices."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._for: Any = None
        self._grammar: TokenGrammar | None = None
        self._error: RequestError | None = None

    def grammar(self, tokenizer: Any) -> TokenGrammar | None:
        with self._lock:
            if self._for is not tokenizer:
                self._error = None
                try:
                    self._grammar = self._compile(tokenizer)
                except RequestError as exc:
                    self._error = exc
                except (ValueError, TypeError, KeyError, RecursionError) as exc:
                    # a hostile schema the engine did not name: refused, never a 5xx
                    self._error = RequestError(
                        f"Cannot compile the output grammar: {type(exc).__name__}: {exc}",
                        param="response_format" if isinstance(self, JsonOutput) else "tools",
                        code="invalid_schema",
                    )
                self._for = tokenizer
            if self._error is not None:
                raise self._error
            return self._grammar

    def _compile(self, tokenizer: Any) -> TokenGrammar | None:
        raise NotImplementedError

    def prepare(self, tokenizer: Any) -> None:
        """Compile (or fail) now, so that submitting finds the grammar built."""
        self.grammar(tokenizer)

    def __call__(self, tokenizer: Any) -> Any:
        grammar = self.grammar(tokenizer)
        return None if grammar is None else grammar.start()


@dataclass(eq=False)
class JsonOutput(_Compiled):
    """``response_format``: ``schema`` None for ``json_object`` (any JSON object),
    else the ``json_schema`` document's schema; ``chat`` picks the stop ids that end
    the document (the chat template's in a chat)."""

    schema: Mapping[str, Any] | None
    chat: bool
    param: str = "response_format"

    def __post_init__(self) -> None:
        _Compiled.__init__(self)

    def _compile(self, tokenizer: Any) -> TokenGrammar:
        try:
            return TokenGrammar.for_tokenizer(self.schema, tokenizer, chat=self.chat)
        except SchemaError as exc:
            raise RequestError(
                f"The JSON schema is refused: {exc}", param=self.param, code="invalid_schema"
            ) from None
        except GrammarError as exc:
            raise RequestError(
                f"Structured output is not available for this model: {exc}",
                param="response_format",
                code="unsupported_response_format",
            ) from None


@dataclass(eq=False)
class ToolCalls(_Compiled):
    """``tools`` (OpenAI's list, checked), ``tool_choice`` and ``parallel_tool_calls``.

    The reply is constrained by `riftco.text.grammar.tool_grammar` (``"none"``: not
    constrained, and the tools are not offered); the tools are offered in a system
    message (`tools_prompt`) ahead of the chat; the finished text is split into its
    content and its calls (`parse_tool_calls`)."""

    tools: Sequence[Mapping[str, Any]]
    tool_choice: Any = "auto"
    parallel: bool = True
    offered: bool = field(init=False)

    def __post_init__(self) -> None:
        _Compiled.__init__(self)
        self.offered = self.tool_choice != "none"

    def _compile(self, tokenizer: Any) -> TokenGrammar | None:
        if not self.offered:
            return None  # tool_choice none: the tools are not offered, any template serves
        self.syntax(tokenizer)
        try:
            return tool_grammar(
                list(self.tools),
                tokenizer,
                tool_choice=self.tool_choice,
                parallel_tool_calls=self.parallel,
            )
        except SchemaError as exc:
            raise RequestError(
                f"A tool's parameters are refused: {exc}", param="tools", code="invalid_schema"
            ) from None
        except GrammarError as exc:
            raise RequestError(f"The tools are refused: {exc}", param="tools") from None

    @staticmethod
    def syntax(tokenizer: Any) -> Any:
        """The chat template's tool-call syntax; 400 when it declares none."""
        try:
            return template_syntax(getattr(tokenizer, "chat_template", None))
        except ToolCallError as exc:
            raise RequestError(
                f"Tools are not supported by this model: {exc}",
                param="tools",
                code="tools_unsupported",
            ) from None

    def system_message(self, tokenizer: Any) -> str:
        """The system message offering the tools, in the template's syntax."""
        return tools_prompt(list(self.tools), self.syntax(tokenizer))

    def split(self, text: str, tokenizer: Any) -> tuple[str, tuple[ToolCall, ...]]:
        """The reply's content and its calls (none when ``tool_choice`` is none)."""
        if not self.offered:
            return text, ()
        parsed = parse_tool_calls(text, self.syntax(tokenizer))
        calls = tuple(
            ToolCall(f"call_{secrets.token_hex(12)}", c["name"], c["arguments"])
            for c in parsed.tool_calls
        )
        return (parsed.content if calls else text), calls


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: its id, the function's name and the arguments (JSON text)."""

    id: str
    name: str
    arguments: str

    def to_openai(self, index: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return body if index is None else {"index": index, **body}


__all__ = ["JsonOutput", "ToolCall", "ToolCalls"]
