"""Tool calls: the grammar for a ``tools`` list and ``tool_choice``, and the parser.

The syntax is the chat template's :class:`~riftco.text.chat.ToolCallSyntax`:
``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, several calls joined
by a newline. ``tool_choice``:

- ``"required"``: the reply is one or more calls (one with
  ``parallel_tool_calls=False``), each naming one of the tools with arguments valid
  against that tool's ``parameters``;
- ``{"type": "function", "function": {"name": "f"}}``: the same, calling ``f`` only;
- ``"auto"``: free text, in which every call (from its start marker on) is
  constrained as above; text without the marker is unconstrained;
- ``"none"``: no grammar (:func:`tool_grammar` returns ``None``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from riftco.text.chat import ChatTemplate, ToolCallSyntax
from riftco.text.grammar.errors import GrammarLimitError, SchemaError, ToolCallError
from riftco.text.grammar.nodes import OBJECT, Graph, List, Literals, Object, Sequence_, Text, Union
from riftco.text.grammar.schema import Compiler, GrammarLimits, _json_bytes
from riftco.text.grammar.tokens import DEFAULT_MAX_WHITESPACE, TokenGrammar, Vocabulary

if TYPE_CHECKING:
    from riftco.text.base import Tokenizer

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
MAX_PARALLEL_CALLS = 16


@dataclass(frozen=True)
class Tool:
    """One function a model may call: its name and its parameters' JSON schema."""

    name: str
    parameters: Mapping[str, Any]
    description: str = ""


def check_tools(tools: Any) -> list[Tool]:
    """OpenAI's ``tools`` list (``{"type": "function", "function": {...}}`` entries)."""
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        raise ToolCallError("tools: expected a non-empty list of function tools")
    out: list[Tool] = []
    for k, tool in enumerate(tools):
        at = f"tools[{k}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise ToolCallError(f'{at}: expected {{"type": "function", "function": {{...}}}}')
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise ToolCallError(f"{at}.function: expected an object")
        unknown = set(function) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolCallError(f"{at}.function: unexpected keys {sorted(unknown)}")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ToolCallError(
                f"{at}.function.name: expected 1 to 64 of a-z, A-Z, 0-9, _ and -; found {name!r:.80}"
            )
        if any(t.name == name for t in out):
            raise ToolCallError(f"{at}.function.name: {name!r} appears twice")
        parameters = function.get("parameters", NO_PARAMETERS)
        if not isinstance(parameters, Mapping):
            raise ToolCallError(f"{at}.function.parameters: expected a JSON schema object")
        description = function.get("description", "")
        if not isinstance(description, str):
            raise ToolCallError(f"{at}.function.description: expected a string")
        out.append(Tool(name, parameters, description))
    return out


def _chosen(tools: list[Tool], tool_choice: Any) -> tuple[str, list[Tool]]:
    """``("none" | "auto" | "required", the tools that may be called)``."""
    if tool_choice in ("none", "auto", "required"):
        return tool_choice, tools
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        for tool in tools:
            if tool.name == name:
                return "required", [tool]
        raise ToolCallError(
            f"tool_choice: names {name!r:.80}, which is not among the tools "
            f"{[t.name for t in tools]}"
        )
    raise ToolCallError(
        'tool_choice: expected "none", "auto", "required" or '
        f'{{"type": "function", "function": {{"name": ...}}}}; found {tool_choice!r:.80}'
    )


def tool_graph(
    tools: list[Tool],
    mode: str,
    syntax: ToolCallSyntax,
    limits: GrammarLimits,
    parallel_tool_calls: bool,
    max_whitespace: int,
) -> tuple[Graph, int]:
    """The byte grammar of a reply under ``mode`` (``"auto"`` or ``"required"``)."""
    if len(tools) > limits.max_alternatives:
        raise GrammarLimitError(
            f"tools: expected at most {limits.max_alternatives} tools "
            f"(GrammarLimits.max_alternatives); found {len(tools)}"
        )
    graph = Graph(max_whitespace)
    calls: list[int] = []
    compilers = []
    for k, tool in enumerate(tools):
        compiler = Compiler(tool.parameters, limits, graph)
        try:
            arguments = compiler.compile(tool.parameters, "#")
        except SchemaError as exc:
            where = f"tools[{k}].function.parameters{exc.path}"
            raise type(exc)(exc.message, keyword=exc.keyword, path=where) from None
        compilers.append((compiler, arguments))
        name = graph.add(Literals([_json_bytes(tool.name)], {"string"}))
        calls.append(
            graph.add(Object([(b'"name"', name, True), (b'"arguments"', arguments, True)]))
        )
    call = graph.add(Union(calls)) if len(calls) > 1 else calls[0]
    start, end = syntax.start.encode(), syntax.end.encode()
    most = MAX_PARALLEL_CALLS if parallel_tool_calls else 1
    if mode == "auto":
        body = graph.add(Sequence_([call, end], (OBJECT,)))
        root = graph.add(Text(start, body, most))
    else:
        wrapped = graph.add(Sequence_([start, call, end], (OBJECT,)))
        separator = syntax.separator.encode()
        root = graph.add(List(wrapped, 1, most, (b"", separator, b""), whitespace=False))
    for k, (compiler, arguments) in enumerate(compilers):
        try:
            compiler.check(arguments)  # heights, union widths and oneOf of each tool
        except SchemaError as exc:
            where = f"tools[{k}].function.parameters{exc.path}"
            raise type(exc)(exc.message, keyword=exc.keyword, path=where) from None
    compilers[0][0].check(root)
    return graph, root


def tool_grammar(
    tools: Any,
    tokenizer: Tokenizer,
    *,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    limits: GrammarLimits | None = None,
    max_whitespace: int = DEFAULT_MAX_WHITESPACE,
) -> TokenGrammar | None:
    """The constraint for a chat reply given OpenAI's ``tools`` and ``tool_choice``.

    ``None`` for ``tool_choice="none"`` (the reply is unconstrained). The tokenizer's
    chat template must declare a tool-call syntax (:class:`ToolCallError` otherwise).
    """
    syntax = template_syntax(tokenizer.chat_template)
    checked = check_tools(tools)
    mode, allowed = _chosen(checked, tool_choice)
    if mode == "none":
        return None
    limits = GrammarLimits() if limits is None else limits
    graph, root = tool_graph(allowed, mode, syntax, limits, parallel_tool_calls, max_whitespace)
    return TokenGrammar(graph, root, Vocabulary.of_tokenizer(tokenizer, chat=True), limits=limits)


def template_syntax(template: ChatTemplate | None) -> ToolCallSyntax:
    """The template's tool-call syntax; :class:`ToolCallError` when it has none."""
    if template is None:
        raise ToolCallError("tools need a chat template; this tokenizer has none")
    if template.tool_call is None:
        raise ToolCallError(
            "this chat template declares no tool-call syntax (ChatTemplate.tool_call), so "
            "tools cannot be offered to this model"
        )
    return template.tool_call


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into its text and its tool calls (``arguments`` as JSON text)."""

    content: str
    tool_calls: list[dict[str, str]] = field(default_factory=list)


def parse_tool_calls(text: str, syntax: ToolCallSyntax | None = None) -> ParsedReply:
    """The calls written in ``text`` and what remains of it.

    A call is ``start``, optional whitespace, a JSON object with a string ``name``
    and an object ``arguments``, optional whitespace, ``end``; anything else
    (an unfinished or malformed call) stays in the content as written.
    """
    syntax = ToolCallSyntax() if syntax is None else syntax
    decoder = json.JSONDecoder()
    calls: list[dict[str, str]] = []
    pieces: list[str] = []
    at = 0
    while True:
        found = text.find(syntax.start, at)
        if found < 0:
            pieces.append(text[at:])
            break
        begin = found + len(syntax.start)
        parsed = _parse_call(text, begin, syntax.end, decoder)
        if parsed is None:
            pieces.append(text[at:begin])
            at = begin
            continue
        call, stop = parsed
        pieces.append(text[at:found])
        calls.append(call)
        at = stop
    content = "".join(pieces)
    if calls:
        content = content.strip()
    return ParsedReply(content, calls)


def _parse_call(
    text: str, begin: int, end: str, decoder: json.JSONDecoder
) -> tuple[dict[str, str], int] | None:
    index = _skip_space(text, begin)
    try:
        value, index = decoder.raw_decode(text, index)
    except ValueError:
        return None
    index = _skip_space(text, index)
    if not text.startswith(end, index):
        return None
    if not isinstance(value, dict) or set(value) != {"name", "arguments"}:
        return None
    name, arguments = value["name"], value["arguments"]
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    call = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    return call, index + len(end)


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index


def tools_prompt(tools: Any, syntax: ToolCallSyntax | None = None) -> str:
    """A system message offering ``tools`` and saying how to call them."""
    syntax = ToolCallSyntax() if syntax is None else syntax
    checked = check_tools(tools)
    listed = "\n".join(
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.parameters},
            ensure_ascii=False,
        )
        for t in checked
    )
    example = syntax.render_call("<name>", {"<argument>": "<value>"})
    return (
        "You may call these tools, one JSON object each:\n"
        f"{listed}\n"
        f"To call a tool, write {example}"
    )
