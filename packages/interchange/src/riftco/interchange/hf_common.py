"""Pieces shared by the GPT-2 and Llama converters."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.interchange.errors import ConversionError

#: Largest size field a config.json may hold (sizes are then checked against the tensors).
MAX_CONFIG_INT = 1 << 31


class Taker:
    """Takes tensors by name; names a missing one, and at the end any left unused."""

    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self._tensors = tensors

    def __call__(self, name: str) -> np.ndarray:
        try:
            return self._tensors.pop(name)
        except KeyError:
            raise ConversionError(f"model weights: missing {name}") from None

    def pop(self, name: str) -> np.ndarray | None:
        return self._tensors.pop(name, None)

    def finish(self) -> None:
        if self._tensors:
            names = sorted(self._tensors)
            more = f" and {len(names) - 6} more" if len(names) > 6 else ""
            raise ConversionError(f"model weights: unexpected {', '.join(names[:6])}{more}")


def positive_int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_CONFIG_INT:
        raise ConversionError(
            f"config.json: {key}: expected a positive integer up to {MAX_CONFIG_INT}; "
            f"found {_show(value)}"
        )
    return value


def boolean(config: Mapping[str, Any], key: str, default: bool) -> bool:
    """A JSON boolean (``"false"``, a string, is refused rather than read as true)."""
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConversionError(
            f"config.json: {key}: expected true or false; found {_show(value)} "
            f"({type(value).__name__})"
        )
    return value


def number(config: Mapping[str, Any], key: str, default: float) -> float:
    """A finite JSON number (an integer or a float, not a boolean or a string)."""
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConversionError(f"config.json: {key}: expected a number; found {_show(value)}")
    try:
        result = float(value)
    except OverflowError:
        raise ConversionError(
            f"config.json: {key}: expected a finite number; found a huge integer"
        ) from None
    if not math.isfinite(result):
        raise ConversionError(f"config.json: {key}: expected a finite number; found {value!r}")
    return result


def string(config: Mapping[str, Any], key: str, default: str) -> str:
    value = config.get(key, default)
    if not isinstance(value, str):
        raise ConversionError(f"config.json: {key}: expected a string; found {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = (
        repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a huge integer"
    )
    return text if len(text) <= 60 else text[:57] + "..."


def refuse_unsupported(config: Mapping[str, Any], supported: Mapping[str, Any]) -> None:
    """Refuse, by name, each key whose value differs from the one riftco implements."""
    for key, default in supported.items():
        found = config.get(key, default)
        if type(found) is not type(default) or found != default:
            raise ConversionError(
                f"config.json: {key}={config[key]!r} is not supported "
                f"(riftco implements {key}={default!r})"
            )


def float32(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(a, dtype=np.float32) for name, a in tensors.items()}
