"""Chat templates: a conversation as text, ids, and a mask of assistant tokens.

A template is data, saved with the tokenizer: for each role a prefix and a
suffix, which role is the assistant, and the prompt that asks for a reply. A
message renders as ``prefix + content + suffix``. Template strings are encoded
with special tokens recognised; message content never is, so no content can
forge a role marker. Each string is encoded on its own, so merges never cross
from template text into content. The assistant mask marks the tokens of each
assistant message's content and suffix (its end marker), which post-training
learns to predict, stop included.

A template may declare a tool-call syntax (:class:`ToolCallSyntax`): the
assistant calls a tool by writing ``start + {"name": ..., "arguments": {...}} + end``
(several calls joined by ``separator``), and tool results come back as messages
of ``tool_role``, their content wrapped in ``result_start`` and ``result_end``.
Assistant messages with ``tool_calls`` render in that syntax, as assistant
content (so post-training learns to write it); a template without a syntax
refuses them. Arguments given as JSON text are checked (one strict JSON object)
and embedded as given; a mapping is written with ``json.dumps(...,
ensure_ascii=False)``. The markers are content, not template strings, so a byte
tokenizer need not hold their bytes unless tools are used. A template with a
role named ``tool`` speaks the default syntax unless it says otherwise
(``tool_call=None`` or another syntax), so a template rebuilt from its roles
alone (as from its Jinja export) keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from riftco.core import JSONError, loads_strict
from riftco.text.errors import ChatTemplateError
from riftco.text.special import ASSISTANT, END, SYSTEM, USER

# Bounds on one tool call's arguments given as JSON text: its length in characters, the
# nesting of its arrays and objects, and the digits of one integer (Python's own limit).
MAX_TOOL_CALL_CHARS = 1 << 20
MAX_TOOL_CALL_DEPTH = 512
MAX_TOOL_CALL_INT_DIGITS = 4300


@dataclass(frozen=True)
class ToolCallSyntax:
    """How the assistant writes tool calls: ``start + JSON + end``, joined by ``separator``.

    The JSON is ``'{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
    + arguments + '}'``: arguments given as JSON text are embedded as given (once checked
    to be one JSON object), a mapping is written with ``json.dumps(..., ensure_ascii=False)``
    (for a mapping, the same text as ``json.dumps`` of the whole call). ``tool_role`` is
    the role of the messages that carry results back (it must be one of the template's
    roles), rendered as ``result_start + content + result_end``.
    """

    start: str = "<tool_call>"
    end: str = "</tool_call>"
    separator: str = "\n"
    tool_role: str = "tool"
    result_start: str = "<tool_response>"
    result_end: str = "</tool_response>"

    FIELDS: ClassVar[tuple[str, ...]] = (
        "start",
        "end",
        "separator",
        "tool_role",
        "result_start",
        "result_end",
    )

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            if not isinstance(getattr(self, name), str):
                raise ChatTemplateError(f"tool_call.{name}: expected a string")
        if not self.start or not self.end:
            raise ChatTemplateError("tool_call: expected non-empty start and end markers")
        if "{" in self.start or self.end.startswith((",", "}", "]", " ")):
            raise ChatTemplateError(
                "tool_call: expected markers that cannot be read as part of the JSON call"
            )

    def to_state(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_state(cls, state: Any) -> ToolCallSyntax:
        if not isinstance(state, Mapping) or set(state) != set(cls.FIELDS):
            raise ChatTemplateError(f"tool_call: expected an object with keys {list(cls.FIELDS)}")
        return cls(**{name: state[name] for name in cls.FIELDS})

    def render_call(self, name: str, arguments: Any) -> str:
        """One call as the assistant writes it; ``arguments`` a mapping or its JSON text
        (embedded as given). Raises `ChatTemplateError` for arguments that are neither."""
        return _write_call(self, name, _arguments_text(arguments, "arguments"))

    def render_calls(self, calls: Sequence[tuple[str, Any]]) -> str:
        return self.separator.join(self.render_call(name, args) for name, args in calls)


def _write_call(syntax: ToolCallSyntax, name: str, arguments: str) -> str:
    """``arguments`` is checked JSON text (`_arguments_text`)."""
    named = json.dumps(name, ensure_ascii=False)
    return syntax.start + '{"name": ' + named + ', "arguments": ' + arguments + "}" + syntax.end


def _arguments_text(arguments: Any, where: str) -> str:
    """A tool call's arguments as the JSON text its call embeds.

    JSON text comes back as given once checked: at most `MAX_TOOL_CALL_CHARS`
    characters of strict JSON (no duplicate keys, no ``NaN`` or infinity, nesting at
    most `MAX_TOOL_CALL_DEPTH`, integers of at most `MAX_TOOL_CALL_INT_DIGITS` digits)
    whose value is an object. A mapping is written with ``json.dumps(...,
    ensure_ascii=False)`` (transformers' ``tojson``). Anything else raises
    `ChatTemplateError` naming ``where``.
    """
    if isinstance(arguments, str):
        if len(arguments) > MAX_TOOL_CALL_CHARS:
            raise ChatTemplateError(
                f"{where}: expected arguments of at most {MAX_TOOL_CALL_CHARS} characters; "
                f"found {len(arguments)}"
            )
        try:
            value = loads_strict(
                arguments, max_depth=MAX_TOOL_CALL_DEPTH, max_int_digits=MAX_TOOL_CALL_INT_DIGITS
            )
        except (JSONError, RecursionError) as exc:
            reason = "nesting too deep" if isinstance(exc, RecursionError) else str(exc)
            raise ChatTemplateError(
                f"{where}: expected function.arguments to be JSON text ({reason}); "
                f"found {arguments!r:.60}"
            ) from None
        if not isinstance(value, dict):
            raise ChatTemplateError(
                f"{where}: expected function.arguments to be a JSON object; found JSON text "
                f"of a {type(value).__name__}"
            )
        return arguments
    if not isinstance(arguments, Mapping):
        raise ChatTemplateError(
            f"{where}: expected function.arguments to be a JSON object; found "
            f"{type(arguments).__name__}"
        )
    try:
        return json.dumps(
            arguments if isinstance(arguments, dict) else dict(arguments), ensure_ascii=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "nesting too deep" if isinstance(exc, RecursionError) else str(exc)
        raise ChatTemplateError(
            f"{where}: expected function.arguments to be a mapping of JSON values ({reason})"
        ) from None


@dataclass(frozen=True)
class RoleFormat:
    """The text around one role's messages."""

    prefix: str
    suffix: str


class _Implied:
    """The default of ``ChatTemplate.tool_call``: implied by the roles."""

    def __repr__(self) -> str:
        return "IMPLIED"


IMPLIED: Any = _Implied()


def implied_tool_call(roles: Mapping[str, Any]) -> ToolCallSyntax | None:
    """The syntax a template with these roles speaks unless it says otherwise."""
    return ToolCallSyntax() if "tool" in roles else None


@dataclass(frozen=True)
class ChatTemplate:
    """How messages become text; ``roles`` lists the roles a message may have.

    ``tool_call``: the tool-call syntax, ``None`` for none; left out, the default
    syntax when a role is named ``tool`` and none otherwise.
    """

    roles: Mapping[str, RoleFormat]
    generation_prompt: str
    assistant_role: str = "assistant"
    tool_call: ToolCallSyntax | None = IMPLIED

    def __post_init__(self) -> None:
        if not self.roles:
            raise ChatTemplateError("expected at least one role; found none")
        for role, fmt in self.roles.items():
            if not isinstance(role, str) or not role:
                raise ChatTemplateError(
                    f"expected role names to be non-empty strings; found {role!r}"
                )
            if not isinstance(fmt, RoleFormat):
                raise ChatTemplateError(f"role {role!r}: expected a RoleFormat; found {fmt!r}")
            for name in ("prefix", "suffix"):
                if not isinstance(getattr(fmt, name), str):
                    raise ChatTemplateError(f"role {role!r}: expected {name} to be a string")
        if not isinstance(self.generation_prompt, str):
            raise ChatTemplateError("expected generation_prompt to be a string")
        if self.assistant_role not in self.roles:
            raise ChatTemplateError(
                f"expected assistant_role among the roles {sorted(self.roles)}; "
                f"found {self.assistant_role!r}"
            )
        if isinstance(self.tool_call, _Implied):
            object.__setattr__(self, "tool_call", implied_tool_call(self.roles))
        if self.tool_call is not None:
            if not isinstance(self.tool_call, ToolCallSyntax):
                raise ChatTemplateError(
                    f"expected tool_call to be a ToolCallSyntax or None; found {self.tool_call!r}"
                )
            if self.tool_call.tool_role not in self.roles:
                raise ChatTemplateError(
                    f"expected tool_call.tool_role among the roles {sorted(self.roles)}; "
                    f"found {self.tool_call.tool_role!r}"
                )
        object.__setattr__(self, "roles", MappingProxyType(dict(self.roles)))

    def template_strings(self) -> dict[str, str]:
        """Every template string, by where it sits (for validation messages)."""
        found = {"generation_prompt": self.generation_prompt}
        for role, fmt in self.roles.items():
            found[f"{role}.prefix"] = fmt.prefix
            found[f"{role}.suffix"] = fmt.suffix
        return found

    def __reduce__(self) -> tuple[Any, ...]:
        return (ChatTemplate.from_state, (self.to_state(),))

    def to_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "roles": {r: {"prefix": f.prefix, "suffix": f.suffix} for r, f in self.roles.items()},
            "assistant_role": self.assistant_role,
            "generation_prompt": self.generation_prompt,
        }
        if self.tool_call != implied_tool_call(self.roles):  # only when not implied
            state["tool_call"] = None if self.tool_call is None else self.tool_call.to_state()
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ChatTemplate:
        if not isinstance(state, Mapping):
            raise ChatTemplateError(f"expected an object; found {type(state).__name__}")
        expected = {"roles", "assistant_role", "generation_prompt"}
        if set(state) - {"tool_call"} != expected:
            raise ChatTemplateError(
                f"expected keys {sorted(expected)} (and optionally tool_call); missing "
                f"{sorted(expected - set(state))}, unexpected "
                f"{sorted(set(state) - expected - {'tool_call'})}"
            )
        roles = state["roles"]
        if not isinstance(roles, Mapping):
            raise ChatTemplateError(f"roles: expected an object; found {type(roles).__name__}")
        formats = {}
        for role, fmt in roles.items():
            if not isinstance(fmt, Mapping) or set(fmt) != {"prefix", "suffix"}:
                raise ChatTemplateError(f"role {role!r}: expected an object with prefix, suffix")
            formats[role] = RoleFormat(fmt["prefix"], fmt["suffix"])
        tool_call = IMPLIED
        if "tool_call" in state:
            syntax = state["tool_call"]
            tool_call = None if syntax is None else ToolCallSyntax.from_state(syntax)
        return cls(formats, state["generation_prompt"], state["assistant_role"], tool_call)

    def render(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False
    ) -> list[tuple[str, bool, bool]]:
        """The conversation as ``(text, is_template, in_assistant_mask)`` spans."""
        if isinstance(messages, (str, Mapping)):
            raise ChatTemplateError("expected a list of messages; found a single value")
        spans: list[tuple[str, bool, bool]] = []
        for index, message in enumerate(messages):
            role, content = _check_message(index, message, self.roles, self)
            fmt = self.roles[role]
            masked = role == self.assistant_role
            spans += [
                (fmt.prefix, True, False),
                (content, False, masked),
                (fmt.suffix, True, masked),
            ]
        if add_generation_prompt:
            spans.append((self.generation_prompt, True, False))
        return [span for span in spans if span[0]]


DEFAULT_CHAT_TEMPLATE = ChatTemplate(
    roles={
        "system": RoleFormat(SYSTEM, END),
        "user": RoleFormat(USER, END),
        "assistant": RoleFormat(ASSISTANT, END),
        # Tool results come back in a user turn, inside the syntax's result markers.
        "tool": RoleFormat(USER, END),
    },
    generation_prompt=ASSISTANT,
)


@dataclass(frozen=True)
class ChatEncoding:
    """A rendered conversation: ids, text, and 1 where a token is the assistant's."""

    ids: list[int]
    text: str
    assistant_mask: list[int] = field(default_factory=list)


def encode_chat(
    template: ChatTemplate,
    encode: Callable[[str, bool], list[int]],
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool,
) -> ChatEncoding:
    """Render and encode; ``encode(text, allow_special)`` is the tokenizer's."""
    ids: list[int] = []
    mask: list[int] = []
    texts: list[str] = []
    for text, is_template, masked in template.render(messages, add_generation_prompt):
        piece = encode(text, is_template)
        ids += piece
        mask += [int(masked)] * len(piece)
        texts.append(text)
    return ChatEncoding(ids, "".join(texts), mask)


def _check_message(
    index: int, message: Any, roles: Mapping[str, RoleFormat], template: ChatTemplate
) -> tuple[str, str]:
    where = f"message {index}"
    if not isinstance(message, Mapping):
        raise ChatTemplateError(
            f"{where}: expected a mapping with role and content; found {type(message).__name__}"
        )
    calls = message.get("tool_calls")
    if "role" not in message or ("content" not in message and calls is None):
        raise ChatTemplateError(f"{where}: expected keys role and content; found {sorted(message)}")
    role, content = message["role"], message.get("content")
    if not isinstance(role, str) or role not in roles:
        raise ChatTemplateError(f"{where}: expected a role among {sorted(roles)}; found {role!r}")
    if calls is not None:
        if role != template.assistant_role:
            raise ChatTemplateError(f"{where}: only {template.assistant_role} messages call tools")
        if template.tool_call is None:
            raise ChatTemplateError(
                f"{where}: this chat template declares no tool-call syntax, so it cannot "
                "render tool_calls"
            )
        speaks = template.tool_call
        rendered = speaks.separator.join(
            _write_call(speaks, name, arguments) for name, arguments in _tool_calls(where, calls)
        )
        if content is None or content == "":
            return role, rendered
        if not isinstance(content, str):
            raise ChatTemplateError(
                f"{where}: expected content to be a string or null; found {type(content).__name__}"
            )
        return role, content + speaks.separator + rendered
    if not isinstance(content, str):
        raise ChatTemplateError(
            f"{where}: expected content to be a string; found {type(content).__name__}"
        )
    syntax = template.tool_call
    if syntax is not None and role == syntax.tool_role:
        return role, syntax.result_start + content + syntax.result_end
    return role, content


def _tool_calls(where: str, calls: Any) -> list[tuple[str, str]]:
    """OpenAI ``tool_calls`` entries as ``(name, arguments JSON text)`` pairs, checked."""
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)) or not calls:
        raise ChatTemplateError(f"{where}: tool_calls: expected a non-empty list")
    out: list[tuple[str, str]] = []
    for k, call in enumerate(calls):
        at = f"{where}: tool_calls[{k}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise ChatTemplateError(f"{at}: expected an object with a function object")
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            raise ChatTemplateError(f"{at}: expected function.name to be a non-empty string")
        out.append((name, _arguments_text(arguments, at)))
    return out
