"""Pieces shared by the GPT-2 and Llama converters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.interchange.errors import ConversionError


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
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConversionError(f"config.json: {key}: expected a positive integer; found {value!r}")
    return value


def refuse_unsupported(config: Mapping[str, Any], supported: Mapping[str, Any]) -> None:
    """Refuse, by name, each key whose value differs from the one riftco implements."""
    for key, default in supported.items():
        if config.get(key, default) != default:
            raise ConversionError(
                f"config.json: {key}={config[key]!r} is not supported "
                f"(riftco implements {key}={default!r})"
            )


def float32(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(a, dtype=np.float32) for name, a in tensors.items()}
