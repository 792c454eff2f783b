"""Post-training data: conversations from JSONL, and the embedded default instructions.

One JSON object per line, in either form:

- ``{"prompt": "...", "response": "..."}`` (an optional ``"system"`` string too);
- ``{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}]}``
  with roles ``system``, ``user`` and ``assistant`` and at least one assistant message.

Other keys are ignored; blank lines are skipped. A line that is not such an object,
or whose text UTF-8 cannot hold (a lone surrogate escape, in a prompt or a response),
raises ``DataError`` naming the file and the line number.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from riftco.core import JSONError, loads_strict, read_bounded
from riftco.train.errors import DataError

ROLES = ("system", "user", "assistant")
DEFAULT_INSTRUCTIONS = "riftco.train/data/instructions.jsonl"
"""The name the embedded default instructions go by in logs and fingerprints."""
MAX_JSONL_BYTES = 1 << 30


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class ChatExample:
    """One conversation; ``line`` is where it came from (1-based), when from a file."""

    messages: tuple[Message, ...]
    line: int | None = None

    def as_dicts(self) -> list[dict[str, str]]:
        """The messages as ``{"role", "content"}`` dicts, as chat templates take them."""
        return [{"role": m.role, "content": m.content} for m in self.messages]

    @property
    def prompt(self) -> list[dict[str, str]]:
        """The messages before the last assistant reply (what a user would send)."""
        last = max(i for i, m in enumerate(self.messages) if m.role == "assistant")
        return self.as_dicts()[:last]

    @property
    def response(self) -> str:
        """The content of the last assistant message."""
        return [m for m in self.messages if m.role == "assistant"][-1].content


def example(prompt: str, response: str, system: str | None = None) -> ChatExample:
    """A one-turn conversation."""
    messages = [Message("user", prompt), Message("assistant", response)]
    if system:
        messages.insert(0, Message("system", system))
    return ChatExample(tuple(messages))


def parse_example(record: Any, path: str = "<input>", line: int | None = None) -> ChatExample:
    """One JSONL record as a conversation; raises ``DataError`` naming ``path`` and ``line``."""
    if not isinstance(record, dict):
        raise DataError(f"expected a JSON object; found {type(record).__name__}", path, line)
    if "messages" in record:
        raw = record["messages"]
        if not isinstance(raw, list) or not raw:
            raise DataError("expected 'messages' to be a non-empty list", path, line)
        messages = tuple(_message(m, i, path, line) for i, m in enumerate(raw))
    elif "prompt" in record and "response" in record:
        fields = {k: record[k] for k in ("prompt", "response", "system") if k in record}
        for key, value in fields.items():
            if not isinstance(value, str):
                found = type(value).__name__
                raise DataError(f"expected {key!r} to be a string; found {found}", path, line)
        messages = example(fields["prompt"], fields["response"], fields.get("system")).messages
    else:
        raise DataError(
            f"expected keys 'prompt' and 'response', or 'messages'; found {sorted(record)}",
            path,
            line,
        )
    for index, m in enumerate(messages):
        _check_utf8(m.content, f"message {index} ({m.role})", path, line)
    if not any(m.role == "assistant" for m in messages):
        raise DataError("expected at least one assistant message", path, line)
    if not any(m.content for m in messages if m.role == "assistant"):
        raise DataError("expected a non-empty assistant reply", path, line)
    return ChatExample(messages, line)


def _check_utf8(text: str, where: str, path: str, line: int | None) -> None:
    """Refuse text UTF-8 cannot hold (a lone surrogate such as ``"\\ud800"``, which JSON
    escapes can spell): the tokenizer, the data fingerprint and the bundle all encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(
            f"{where}: expected text UTF-8 can hold; found a lone surrogate "
            f"{text[exc.start]!r} at character {exc.start}",
            path,
            line,
        ) from None


def _message(raw: Any, index: int, path: str, line: int | None) -> Message:
    if not isinstance(raw, dict) or not {"role", "content"} <= set(raw):
        raise DataError(
            f"message {index}: expected an object with 'role' and 'content'", path, line
        )
    role, content = raw["role"], raw["content"]
    if role not in ROLES:
        raise DataError(
            f"message {index}: expected a role among {ROLES}; found {role!r}", path, line
        )
    if not isinstance(content, str):
        found = type(content).__name__
        raise DataError(
            f"message {index}: expected 'content' to be a string; found {found}", path, line
        )
    return Message(role, content)


def parse_jsonl(text: str, path: str = "<input>") -> list[ChatExample]:
    """Every conversation in JSONL ``text``; ``path`` names it in errors."""
    examples = []
    # JSONL lines end at "\n" alone: str.splitlines() would also cut at U+2028, U+0085
    # and other characters that JSON strings may hold unescaped.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            record = loads_strict(line)
        except JSONError as exc:
            raise DataError(str(exc), path, number) from None
        examples.append(parse_example(record, path, number))
    if not examples:
        raise DataError("expected at least one example; the file holds none", path)
    return examples


def load_jsonl(path: str | os.PathLike[str]) -> list[ChatExample]:
    """The conversations in a JSONL file (see the module docstring for the forms)."""
    path = Path(path)
    data = read_bounded(path, MAX_JSONL_BYTES, DataError)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(
            f"expected UTF-8; found byte {data[exc.start]:#04x}", str(path), line
        ) from None
    return parse_jsonl(text, str(path))


def default_instructions() -> list[ChatExample]:
    """The embedded instructions derived from ``pydoc_data.topics`` (see data/make_instructions.py)."""
    text = resources.files("riftco.train").joinpath("data/instructions.jsonl").read_text("utf-8")
    return parse_jsonl(text, DEFAULT_INSTRUCTIONS)


def load_instructions(source: str | os.PathLike[str] | None = None) -> list[ChatExample]:
    """A JSONL file's conversations, or the embedded default when ``source`` is None."""
    return default_instructions() if source is None else load_jsonl(source)


def to_jsonl(examples: Iterable[ChatExample]) -> str:
    """Conversations as JSONL in the ``messages`` form."""
    return "".join(
        json.dumps({"messages": e.as_dicts()}, ensure_ascii=False) + "\n" for e in examples
    )


__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "ROLES",
    "ChatExample",
    "Message",
    "default_instructions",
    "example",
    "load_instructions",
    "load_jsonl",
    "parse_example",
    "parse_jsonl",
    "to_jsonl",
]
