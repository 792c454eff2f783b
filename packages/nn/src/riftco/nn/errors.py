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


class PoolExhausted(CacheError):
    """A paged key/value pool has no page left for a lease or a reservation; nothing
    was changed (riftco-serve raises its own subclass, also a ``ServeError``)."""


class SessionError(RiftcoError, ValueError):
    """A `DecodeSession` used wrongly: closed, rolled back past its length, fed a token
    outside the vocabulary, or batched with a session of another pool or model."""


__all__ = ["CacheError", "ConfigError", "PoolExhausted", "SessionError", "StateDictError"]
