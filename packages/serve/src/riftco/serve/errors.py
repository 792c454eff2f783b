"""Typed errors. Every error riftco-serve raises is a ``RiftcoError``.

A cache used wrongly raises riftco-nn's ``CacheError``, the one error of the
key/value cache interface that every cache (nn's contiguous one, the paged pool)
implements; it is re-exported here.

Errors that reach an HTTP client carry the status and the OpenAI error fields
(``type``, ``param``, ``code``) they are reported with.
"""

from __future__ import annotations

from riftco.nn.errors import CacheError
from riftco.nn.errors import PoolExhausted as CachePoolExhausted
from riftco.tensor.errors import RiftcoError


class ServeError(RiftcoError):
    """Base class of every riftco-serve error."""


class PoolExhausted(ServeError, CachePoolExhausted):
    """The paged key/value pool has no free page for a lease; nothing was changed
    (riftco-nn's ``PoolExhausted``, raised by the server's pool as a ``ServeError``)."""


class RequestError(ServeError, ValueError):
    """A request the server refuses, with its HTTP status and OpenAI error fields."""

    status: int = 400
    error_type: str = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        if status is not None:
            self.status = status

    def to_body(self) -> dict[str, object]:
        """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidField(RequestError):
    """A field has the wrong type, is missing, or is out of range (422)."""

    status = 422


class UnsupportedParameter(RequestError):
    """A parameter this server does not implement and that would change the result (400)."""


class ModelNotFound(RequestError):
    """The request names a model this server does not serve (404)."""

    status = 404

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model {model!r} does not exist on this server",
            param="model",
            code="model_not_found",
        )


class Overloaded(RequestError):
    """The request queue or the key/value pool is full: retry after ``retry_after`` seconds."""

    status = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message, code="overloaded")
        self.retry_after = retry_after


class NotReady(RequestError):
    """The model is still loading (or failed to load), or the server is draining (503)."""

    status = 503
    error_type = "service_unavailable"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message, code="not_ready")
        self.retry_after = retry_after


class LimitsError(ServeError, ValueError):
    """A server or connection setting out of range (a limit that is not positive, a
    timeout longer than the one containing it, an open-file limit with no room)."""


class GenerationFailed(ServeError, RuntimeError):
    """A model step failed; the requests in that step end with this error."""


__all__ = [
    "CacheError",
    "GenerationFailed",
    "InvalidField",
    "LimitsError",
    "ModelNotFound",
    "NotReady",
    "Overloaded",
    "PoolExhausted",
    "RequestError",
    "ServeError",
    "UnsupportedParameter",
]
