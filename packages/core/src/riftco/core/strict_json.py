"""Strict JSON reading, for documents that come from files riftco did not write.

:func:`loads` accepts standard JSON only (RFC 8259) and refuses, with a
:class:`~riftco.core.errors.JSONError`:

- bytes that are not UTF-8;
- duplicate keys in an object (the standard library keeps the last one silently);
- ``NaN``, ``Infinity`` and ``-Infinity``, and numbers too large for a finite float;
- nesting deeper than ``max_depth`` arrays and objects;
- integers of more than ``max_int_digits`` digits (Python would parse any length,
  in time quadratic in it).

Time and memory are linear in the size of the text: the depth is measured on the
text before anything is built, and integers are measured before they are converted.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from riftco.core.errors import JSONError

MAX_DEPTH = 64
"""The default bound on nested arrays and objects."""
MAX_INT_DIGITS = 100
"""The default bound on the digits of one integer (a 256-bit value has 78)."""

# Strings are removed first, so that brackets inside them do not count; an
# unterminated string runs to the end (the parser then reports it), which keeps
# the scan linear.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


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
    _check_depth(text, max_depth)
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
            parse_float=_finite_float,
            parse_int=lambda digits: _bounded_int(digits, max_int_digits),
        )
    except json.JSONDecodeError as exc:
        raise JSONError(f"expected JSON; {exc}") from None
    except RecursionError:  # only reached with a max_depth above the interpreter's limit
        raise JSONError("JSON nested too deeply for this interpreter") from None


def _check_depth(text: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    depth = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if depth > max_depth:
        raise JSONError(
            f"JSON nested too deeply: expected at most {max_depth} levels of arrays and "
            f"objects; found {depth}"
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


def _finite_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise JSONError(f"expected standard JSON; found {digits[:40]}, beyond a finite float")
    return value


def _bounded_int(digits: str, limit: int) -> int:
    count = len(digits) - digits.startswith("-")
    if count > limit:
        raise JSONError(f"expected integers of at most {limit} digits; found one of {count}")
    return int(digits)


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "loads"]
