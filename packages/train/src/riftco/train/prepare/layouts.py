"""Record layouts: how a row of a public dataset becomes a conversation or a text.

| layout | columns | becomes |
|---|---|---|
| `messages` | `messages` (a list of `{role, content}`) | the conversation as it is |
| `prompt-response` | `prompt`, `response` (`system`) | a one-turn conversation |
| `alpaca` | `instruction`, `output` (`input`) | prompt = instruction, a blank line, input |
| `dolly` | `instruction`, `response` (`context`) | prompt = instruction, a blank line, context |
| `text` | `text` | a document for pretraining |

``detect_layout`` takes the first layout, in that order, whose columns are all present,
and otherwise raises ``DataError`` naming the columns it found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from riftco.train.errors import DataError
from riftco.train.instructions import parse_example


class MalformedRow(ValueError):
    """A row the layout cannot use; the caller adds the row number."""


@dataclass(frozen=True)
class Converted:
    """A converted row: the output line (a JSON object for conversations, the text for
    documents) and the identity that de-duplication and splitting go by."""

    output: Any
    prompt_identity: str
    record_identity: str


@dataclass(frozen=True)
class Layout:
    name: str
    kind: str  # "chat" (prompt/response JSONL) or "text" (plain text)
    required: tuple[str, ...]
    optional: tuple[str, ...]
    convert: Callable[[dict[str, Any]], Converted]

    def describe(self) -> str:
        extra = f" [{', '.join(self.optional)}]" if self.optional else ""
        return f"{self.name} ({', '.join(self.required)}{extra})"


def _string(record: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        found = "nothing" if value is None else type(value).__name__
        raise MalformedRow(f"expected {key!r} to be a string; found {found}")
    if required and not value.strip():
        raise MalformedRow(f"expected a non-empty {key!r}")
    return value


def _identity(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _chat(record: dict[str, Any]) -> Converted:
    try:
        example = parse_example(record)
    except DataError as exc:  # its message starts with the placeholder path
        raise MalformedRow(str(exc).removeprefix("<input>: ")) from None
    if "messages" in record:
        output: dict[str, Any] = {"messages": example.as_dicts()}
    else:
        output = {"prompt": record["prompt"], "response": record["response"]}
        if record.get("system"):
            output = {"system": record["system"], **output}
    return Converted(output, _identity(example.prompt), _identity(example.as_dicts()))


def _instruction(context_key: str, response_key: str) -> Callable[[dict[str, Any]], Converted]:
    def convert(record: dict[str, Any]) -> Converted:
        instruction = _string(record, "instruction")
        context = _string(record, context_key, required=False)
        response = _string(record, response_key)
        prompt = f"{instruction}\n\n{context}" if context.strip() else instruction
        return _chat({"prompt": prompt, "response": response})

    return convert


def _text(record: dict[str, Any]) -> Converted:
    text = _string(record, "text")
    return Converted(text, text, text)


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout("messages", "chat", ("messages",), (), _chat),
        Layout("prompt-response", "chat", ("prompt", "response"), ("system",), _chat),
        Layout(
            "alpaca", "chat", ("instruction", "output"), ("input",), _instruction("input", "output")
        ),
        Layout(
            "dolly",
            "chat",
            ("instruction", "response"),
            ("context",),
            _instruction("context", "response"),
        ),
        Layout("text", "text", ("text",), (), _text),
    )
}


def detect_layout(columns: Sequence[str], source: str) -> Layout:
    """The first layout whose columns ``columns`` holds; ``DataError`` names what was found."""
    present = set(columns)
    for layout in LAYOUTS.values():
        if set(layout.required) <= present:
            return layout
    expected = "; ".join(layout.describe() for layout in LAYOUTS.values())
    raise DataError(
        f"no layout fits the columns found, {sorted(present)}; expected one of: {expected}. "
        "Rename the columns or pass --layout",
        source,
    )


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise DataError(f"expected a layout among {', '.join(LAYOUTS)}; found {name!r}")
    return LAYOUTS[name]


def convert_row(layout: Layout, record: Any) -> Converted:
    """``layout`` applied to one record; ``MalformedRow`` says why it cannot be."""
    if not isinstance(record, dict):
        raise MalformedRow(f"expected an object; found {type(record).__name__}")
    missing = [key for key in layout.required if key not in record]
    if missing:
        raise MalformedRow(f"expected the {layout.name} columns {missing}; found {sorted(record)}")
    return layout.convert(record)


__all__ = [
    "LAYOUTS",
    "Converted",
    "Layout",
    "MalformedRow",
    "convert_row",
    "detect_layout",
    "get_layout",
]
