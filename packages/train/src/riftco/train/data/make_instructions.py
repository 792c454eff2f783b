"""Derive the default post-training instructions from CPython's ``pydoc_data.topics``.

Run from the repository root to regenerate ``instructions.jsonl`` beside this file:

    python packages/train/src/riftco/train/data/make_instructions.py

Each titled section of each topic (the topic itself and its ``====`` subsections,
first occurrence of a title only) yields up to three examples:

- "Explain the X statement." / "Explain <title>." -> the section's first prose
  paragraph (a paragraph that ends in ":" is joined with the next prose one), cut
  to whole sentences within ``MAX_RESPONSE`` characters;
- "What does the X statement do?" / "What does the Python reference say about
  <title>?" -> the same answer;
- "Show the grammar of ..." -> the section's first grammar block (``::=`` rules),
  when it has one that fits.

The output depends only on the topics text, so one Python version always makes
the same file.
"""

from __future__ import annotations

import builtins
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

MAX_RESPONSE = 320
MIN_RESPONSE = 40
OUTPUT = Path(__file__).with_name("instructions.jsonl")

_STATEMENT = re.compile(r'The "([^"]+)" statement')
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"*(])')
_TERMINAL = (".", "!", "?", '."', ".)", ".”")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """``(title, body lines)`` for the topic heading and each ``====`` subsection."""
    lines = text.split("\n")
    found: list[tuple[str, list[str]]] = []
    title: str | None = None
    body: list[str] = []
    i = 0
    while i < len(lines):
        underline = lines[i + 1] if i + 1 < len(lines) else ""
        heading = (
            lines[i].strip()
            and len(underline) == len(lines[i])
            and set(underline) in ({"*"}, {"="})
        )
        if heading:
            if title is not None:
                found.append((title, body))
            title, body = lines[i].strip(), []
            i += 2
            continue
        body.append(lines[i])
        i += 1
    if title is not None:
        found.append((title, body))
    return found


def blocks(body: list[str]) -> list[tuple[bool, str]]:
    """Blank-line separated blocks as ``(is_indented, text)``; prose is joined into one line."""
    found, current = [], []
    for line in [*body, ""]:
        if line.strip():
            current.append(line)
        elif current:
            indented = current[0].startswith(" ")
            text = "\n".join(current) if indented else " ".join(s.strip() for s in current)
            found.append((indented, text))
            current = []
    return found


def first_answer(body: list[str]) -> str | None:
    prose = [text for indented, text in blocks(body) if not indented and text[:2] != "* "]
    if not prose:
        return None
    answer = prose[0]
    if answer.endswith(":") and len(_SENTENCE_END.split(answer)) == 1 and len(prose) > 1:
        answer = answer[:-1] + ". " + prose[1]
    kept = ""
    for sentence in _SENTENCE_END.split(re.sub(r"\s+", " ", answer).strip()):
        candidate = f"{kept} {sentence}".strip()
        if not sentence.endswith(_TERMINAL) or (kept and len(candidate) > MAX_RESPONSE):
            break
        kept = candidate
    if not MIN_RESPONSE <= len(kept) <= 2 * MAX_RESPONSE:
        return None
    return kept


def grammar(body: list[str]) -> str | None:
    for indented, text in blocks(body):
        if indented and "::=" in text:
            rules = "\n".join(
                line[3:] if line.startswith("   ") else line for line in text.split("\n")
            )
            return rules if len(rules) <= MAX_RESPONSE else None
    return None


def prompts(title: str) -> tuple[str, str, str]:
    statement = _STATEMENT.fullmatch(title)
    if statement:
        name = f"the {statement.group(1)} statement"
        return f"Explain {name}.", f"What does {name} do?", f"Show the grammar of {name}."
    words = title.split()
    plain = (
        title[1:2].islower()
        and not any(w[:1].isupper() for w in words[1:])
        and not hasattr(builtins, words[0])  # None, Ellipsis, NotImplemented stay names
    )
    name = title[0].lower() + title[1:] if plain else title
    return (
        f"Explain {name}.",
        f"What does the Python reference say about {name}?",
        f"Show the grammar of {name}.",
    )


def derive_instructions(topics: Mapping[str, str]) -> list[dict[str, str]]:
    """Every example, in topic order, as ``{"prompt", "response", "topic"}``."""
    seen: set[str] = set()
    examples = []
    for key in sorted(topics):
        for title, body in sections(topics[key]):
            if title in seen:
                continue
            seen.add(title)
            explain, ask, show = prompts(title)
            answer = first_answer(body)
            if answer is not None:
                examples.append({"prompt": explain, "response": answer, "topic": key})
                examples.append({"prompt": ask, "response": answer, "topic": key})
            rules = grammar(body)
            if rules is not None:
                examples.append({"prompt": show, "response": rules, "topic": key})
    return examples


def render(examples: list[dict[str, str]]) -> str:
    return "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in examples)


def main() -> int:
    from pydoc_data.topics import topics

    examples = derive_instructions(topics)
    OUTPUT.write_text(render(examples), encoding="utf-8")
    print(f"wrote {len(examples)} examples to {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
