"""Chat templates: a conversation as text, ids, and a mask of assistant tokens.

A template is data, saved with the tokenizer: for each role a prefix and a
suffix, which role is the assistant, and the prompt that asks for a reply. A
message renders as ``prefix + content + suffix``. Template strings are encoded
with special tokens recognised; message content never is, so no content can
forge a role marker. Each string is encoded on its own, so merges never cross
from template text into content. The assistant mask marks the tokens of each
assistant message's content and suffix (its end marker), which post-training
learns to predict, stop included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from riftco.text.errors import ChatTemplateError
from riftco.text.special import ASSISTANT, END, SYSTEM, USER


@dataclass(frozen=True)
class RoleFormat:
    """The text around one role's messages."""

    prefix: str
    suffix: str


@dataclass(frozen=True)
class ChatTemplate:
    """How messages become text; ``roles`` lists the roles a message may have."""

    roles: Mapping[str, RoleFormat]
    generation_prompt: str
    assistant_role: str = "assistant"

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
        return {
            "roles": {r: {"prefix": f.prefix, "suffix": f.suffix} for r, f in self.roles.items()},
            "assistant_role": self.assistant_role,
            "generation_prompt": self.generation_prompt,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ChatTemplate:
        if not isinstance(state, Mapping):
            raise ChatTemplateError(f"expected an object; found {type(state).__name__}")
        expected = {"roles", "assistant_role", "generation_prompt"}
        if set(state) != expected:
            raise ChatTemplateError(
                f"expected keys {sorted(expected)}; missing {sorted(expected - set(state))}, "
                f"unexpected {sorted(set(state) - expected)}"
            )
        roles = state["roles"]
        if not isinstance(roles, Mapping):
            raise ChatTemplateError(f"roles: expected an object; found {type(roles).__name__}")
        formats = {}
        for role, fmt in roles.items():
            if not isinstance(fmt, Mapping) or set(fmt) != {"prefix", "suffix"}:
                raise ChatTemplateError(f"role {role!r}: expected an object with prefix, suffix")
            formats[role] = RoleFormat(fmt["prefix"], fmt["suffix"])
        return cls(formats, state["generation_prompt"], state["assistant_role"])

    def render(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False
    ) -> list[tuple[str, bool, bool]]:
        """The conversation as ``(text, is_template, in_assistant_mask)`` spans."""
        if isinstance(messages, (str, Mapping)):
            raise ChatTemplateError("expected a list of messages; found a single value")
        spans: list[tuple[str, bool, bool]] = []
        for index, message in enumerate(messages):
            role, content = _check_message(index, message, self.roles)
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


def _check_message(index: int, message: Any, roles: Mapping[str, RoleFormat]) -> tuple[str, str]:
    where = f"message {index}"
    if not isinstance(message, Mapping):
        raise ChatTemplateError(
            f"{where}: expected a mapping with role and content; found {type(message).__name__}"
        )
    if "role" not in message or "content" not in message:
        raise ChatTemplateError(f"{where}: expected keys role and content; found {sorted(message)}")
    role, content = message["role"], message["content"]
    if not isinstance(role, str) or role not in roles:
        raise ChatTemplateError(f"{where}: expected a role among {sorted(roles)}; found {role!r}")
    if not isinstance(content, str):
        raise ChatTemplateError(
            f"{where}: expected content to be a string; found {type(content).__name__}"
        )
    return role, content
