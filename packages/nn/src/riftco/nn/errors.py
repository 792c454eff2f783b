"""Typed errors of riftco.nn, all ``RiftcoError``s."""

from __future__ import annotations

from riftco.tensor import RiftcoError


class ConfigError(RiftcoError, ValueError):
    """A configuration (or an input it constrains) is invalid; the message names the
    field, what was expected and what was found."""


class StateDictError(RiftcoError, KeyError):
    """``load_state_dict`` found missing or unexpected keys, or mis-shaped values."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CacheError(RiftcoError, ValueError):
    """A key/value cache was used wrongly: a sequence it does not hold (unknown or
    released), a bad length, or no room. Every cache that implements ``KVCache``
    raises it (riftco-serve's pools included)."""


__all__ = ["CacheError", "ConfigError", "StateDictError"]
