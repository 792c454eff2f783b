"""What the HTTP layer asks of an engine, and the values they exchange.

The HTTP layer validates requests and formats responses; an engine turns a
`GenerationRequest` into a stream of `TextDelta` events closed by one `Finished`.
`riftco.serve.BatchEngine` is the engine over a real model; tests use small fakes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn: ``role`` is ``system``, ``user`` or ``assistant``."""

    role: str
    content: str


@dataclass(frozen=True)
class SamplingOptions:
    """How to pick tokens and when to stop.

    ``temperature`` 0 is greedy; ``top_k`` 0 and ``top_p`` 1 disable those
    filters; ``seed`` None draws a fresh seed. ``repetition_penalty`` > 1 divides
    positive (multiplies negative) logits of tokens already in the sequence.
    Generation stops at the end-of-text token, at the first ``stop`` string
    (which is not returned), or after ``max_tokens`` tokens.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt (text, or token ids) or a chat (messages), with its sampling options."""

    prompt: str | tuple[int, ...] | None = None
    messages: tuple[ChatMessage, ...] | None = None
    options: SamplingOptions = field(default_factory=SamplingOptions)

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("GenerationRequest: give exactly one of prompt and messages")


@dataclass(frozen=True)
class TextDelta:
    """Newly generated text (whole UTF-8 characters; never part of a stop string)."""

    text: str


@dataclass(frozen=True)
class Finished:
    """The last event of a stream."""

    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int


Event = TextDelta | Finished


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for ``/metrics``."""

    waiting: int = 0
    running: int = 0
    pages_in_use: int = 0
    pages_total: int = 0
    prompt_tokens_total: int = 0
    generated_tokens_total: int = 0
    requests_finished_total: int = 0
    requests_rejected_total: int = 0
    tokens_per_second: float = 0.0


@runtime_checkable
class GenerationStream(Protocol):
    """The events of one request; closing it early (``aclose``) frees its resources."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """A loaded model that serves requests.

    ``submit`` is called on the event loop. It validates the prompt against the
    model (raising `RequestError`, e.g. a prompt longer than the context) and
    raises `Overloaded` when the queue is full; otherwise the request is queued
    and its events arrive on the returned stream. A stream ends with
    `Finished`, or raises `GenerationFailed`.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def max_context(self) -> int: ...

    def start(self) -> None:
        """Begin serving (start worker threads); called once, before ``submit``."""

    def submit(self, request: GenerationRequest) -> GenerationStream: ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None:
        """Stop serving: unfinished streams end with `GenerationFailed`."""


__all__ = [
    "ChatMessage",
    "Engine",
    "EngineStats",
    "Event",
    "FinishReason",
    "Finished",
    "GenerationRequest",
    "GenerationStream",
    "SamplingOptions",
    "TextDelta",
]
