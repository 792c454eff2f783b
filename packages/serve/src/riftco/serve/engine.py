"""What the HTTP layer asks of an engine, and the values they exchange.

The HTTP layer validates requests and formats responses; an engine turns a
`GenerationRequest` into a stream of `TextDelta` events closed by one `Finished`.
`riftco.serve.BatchEngine` is the engine over a real model; tests use small fakes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from riftco.nn import SamplingConfig

Bytes = bytes  # the type, under a name the field ``bytes`` does not shadow

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn: ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a
    tool's result). An assistant turn may hold OpenAI ``tool_calls`` (rendered in the
    chat template's tool-call syntax)."""

    role: str
    content: str
    tool_calls: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt (text, or token ids) or a chat (messages), how to pick its tokens, and
    the strings that end it.

    ``options`` is riftco-nn's `SamplingConfig` (``None`` disables ``top_k``,
    ``top_p`` and ``vocab_limit``; ``max_new_tokens`` is OpenAI's ``max_tokens``).
    The engine adds the tokenizer's stop ids (end-of-text, and for a chat the
    template's markers) to ``options.stop_ids`` and limits the draw to the
    tokenizer's ids. Generation also ends at the first of the ``stop`` strings
    (which is not returned).

    With ``truncate`` (a chat only), the oldest turns are dropped to fit the context,
    keeping the system messages (`riftco.serve.fitting.fit_chat`); the stream's
    ``dropped_messages`` says how many went.

    ``echo`` (a prompt only) sends the prompt's text first, as its own `TextDelta`.
    ``options.logprobs`` (None or 0..20) asks for each token's log-probabilities
    (`TokenLogprob` entries on the deltas). ``constraint`` is a factory: called with
    the engine's tokenizer, it returns riftco-nn's ``Constraint`` (``allowed()``,
    ``advance(id)``) that masks this request's draws (structured output); it may
    have ``prepare(tokenizer)``, which compiles it ahead (off the event loop).
    ``tools`` (`riftco.serve.constraints.ToolCalls`, a chat only) offers tools: the
    engine adds their system message, and ends a reply that calls them with
    ``finish_reason="tool_calls"`` and the calls on `Finished`.
    """

    prompt: str | tuple[int, ...] | None = None
    messages: tuple[ChatMessage, ...] | None = None
    options: SamplingConfig = field(default_factory=SamplingConfig)
    stop: tuple[str, ...] = ()
    truncate: bool = False
    echo: bool = False
    constraint: Any = None
    tools: Any = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("GenerationRequest: give exactly one of prompt and messages")
        if self.truncate and self.messages is None:
            raise ValueError("GenerationRequest: truncate applies to messages only")


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probabilities, as OpenAI reports them: its text
    (``token``, invalid UTF-8 replaced), its ``bytes``, its ``logprob``, the ``top``
    most likely ``(text, bytes, logprob)`` alternatives, and ``offset``: where its text
    starts in the choice's text, in characters (the echoed prompt included)."""

    token: str
    bytes: Bytes
    logprob: float
    top: tuple[tuple[str, Bytes, float], ...] = ()
    offset: int = 0


@dataclass(frozen=True)
class TextDelta:
    """Newly generated text (whole UTF-8 characters; never part of a stop string), and
    the log-probabilities of the tokens that released it (when asked for). ``echo``
    marks the echoed prompt."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()
    echo: bool = False


@dataclass(frozen=True)
class Finished:
    """The last event of a stream; ``tool_calls`` holds the calls of a reply that
    made some (`riftco.serve.constraints.ToolCall`)."""

    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    tool_calls: tuple[Any, ...] = ()


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
    """The events of one request; closing it early (``aclose``) frees its resources.
    ``dropped_messages`` (optional, default 0) counts the chat turns left out to fit
    the context."""

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

    # An engine may also offer ``submit_group(requests) -> list[GenerationStream]``:
    # the choices of one HTTP request, queued together or not at all (the HTTP layer
    # falls back to ``submit`` for each, closing the ones already queued on a failure).

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
    "TextDelta",
    "TokenLogprob",
]
