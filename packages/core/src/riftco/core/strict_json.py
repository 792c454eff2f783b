"""Strict JSON reading, for documents that come from files riftco did not write.

:func:`loads` accepts standard JSON only (RFC 8259) and refuses, with a
:class:`~riftco.core.errors.JSONError`:

- bytes that are not UTF-8;
- duplicate keys in an object (the standard library keeps the last one silently);
- ``NaN``, ``Infinity`` and ``-Infinity``, and numbers too large for a finite float;
- nesting deeper than ``max_depth`` arrays and objects;
- integers of more than ``max_int_digits`` digits (Python would parse any length,
  in time quadratic in it).

Time and memory are linear in the size of the text: the parser stops at the
interpreter's recursion limit, the depth and the floats of what it built are then
checked without recursion, and integers are measured before they are converted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from riftco.core.errors import JSONError

MAX_DEPTH = 64
"""The default bound on nested arrays and objects."""
MAX_INT_DIGITS = 100
"""The default bound on the digits of one integer (a 256-bit value has 78)."""


def loads(
    text: str | bytes | bytearray,
    *,
    max_depth: int = MAX_DEPTH,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """The value of the strict JSON document ``text``; raises :class:`JSONError`."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONError(f"expected UTF-8; {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
            parse_int=_int_parser(max_int_digits),
        )
    except json.JSONDecodeError as exc:
        raise JSONError(f"expected JSON; {exc}") from None
    except RecursionError:
        raise JSONError(_too_deep(max_depth, "more than the parser can follow")) from None
    _check_values(value, max_depth)
    return value


def _check_values(value: Any, max_depth: int) -> None:
    """Depth and finite floats, in one pass without recursion."""
    _check_float(value)
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise JSONError(_too_deep(max_depth, f"at least {depth}"))
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, float):
                _check_float(child)


def _check_float(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise JSONError("expected standard JSON; found a number beyond a finite float")


def _too_deep(max_depth: int, found: str) -> str:
    return (
        f"JSON nested too deeply: expected at most {max_depth} levels of arrays and "
        f"objects; found {found}"
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise JSONError(f"duplicate key {key!r}")
        found[key] = value
    return found


def _no_constants(name: str) -> Any:
    raise JSONError(f"expected standard JSON; found {name}")


def _int_parser(limit: int) -> Callable[[str], int]:
    def parse_int(digits: str) -> int:
        if len(digits) > limit and len(digits) - digits.startswith("-") > limit:
            count = len(digits) - digits.startswith("-")
            raise JSONError(f"expected integers of at most {limit} digits; found one of {count}")
        return int(digits)

    return parse_int


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "loads"]
