"""The root of every typed riftco error, and the errors of riftco.core itself."""

from __future__ import annotations


class RiftcoError(Exception):
    """Base class of every Riftco error."""


class JSONError(RiftcoError, ValueError):
    """A document that is not strict JSON, or a value that canonical JSON cannot hold.

    The message says what was expected and what was found; callers prefix where
    (a file, a header, a manifest) when they re-raise it as their own error.
    """


__all__ = ["JSONError", "RiftcoError"]
