"""A griffe extension for the API reference: the sources' docstrings are prose with a
few reStructuredText habits, rendered here as the Markdown they mean.

- A Sphinx role (``:class:`RiftcoError```, ``:func:`~riftco.core.atomic_write```) becomes
  inline code of its target (the last dotted part, for a ``~`` target).
- Doctest lines (``>>> ...`` and their ``...`` continuations) that stand at the
  paragraph's margin become a fenced ``pycon`` block; indented ones already read as a
  code block in Markdown.

Loaded by mkdocstrings (``extensions`` in mkdocs.yml); the docstrings stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const|term):`(~?)([^`]+)`")
DOCTEST = re.compile(r"^(>>>|\.\.\.)( |$)")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown_docstring(text: str) -> str:
    """``text`` with roles as inline code and margin doctests fenced."""
    out: list[str] = []
    in_doctest = False
    for line in ROLE.sub(_role, text).splitlines():
        starts = DOCTEST.match(line) is not None
        if starts and not in_doctest:
            if out and out[-1].strip():
                out.append("")
            out.append("```pycon")
            in_doctest = True
        elif in_doctest and not starts and not line.strip():
            out.append("```")
            in_doctest = False
        elif in_doctest and not starts:
            pass  # the doctest's expected output stays inside the block
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


class ReadableDocstrings(Extension):
    """Rewrites each object's docstring as it is loaded."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
