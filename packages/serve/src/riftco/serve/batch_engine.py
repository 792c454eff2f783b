"""`BatchEngine`: a model, its tokenizer and a paged cache behind the `Engine`
interface, with the scheduler running on its own thread.

The event loop thread tokenizes and queues requests (``submit``); the
scheduler thread runs the steps and pushes text to each request's channel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from riftco.nn import SamplingConfig, TokenLogprobs
from riftco.serve.caches import PagedKVCachePool
from riftco.serve.channel import EventChannel
from riftco.serve.engine import (
    ChatMessage,
    EngineStats,
    Finished,
    GenerationRequest,
    TextDelta,
    TokenLogprob,
)
from riftco.serve.errors import GenerationFailed, RequestError
from riftco.serve.fitting import fit_chat
from riftco.serve.scheduler import Scheduler, SchedulerLimits, StepModel
from riftco.serve.sequence import SequenceState
from riftco.serve.text_stream import TextStream

log = logging.getLogger("riftco.serve")


class ChannelSink:
    """Turns a sequence's tokens into `TextDelta` events (stop strings applied), each
    with the log-probabilities of the tokens that released its text when they were
    asked for (``token_bytes`` names the tokens; ``offset`` is where the choice's text
    starts, after an echoed prompt).

    With ``split`` (a reply offered tools), the text is held until the end, then
    split into its content and its tool calls (``split(text) -> (content, calls)``):
    one `TextDelta` of the content, and `Finished` with the calls
    (``finish_reason="tool_calls"`` when there are some and the reply ended by itself;
    a reply cut by ``max_tokens`` stays ``length``, with the calls it completed)."""

    def __init__(
        self,
        channel: EventChannel,
        text: TextStream,
        token_bytes: Callable[[int], bytes] | None = None,
        offset: int = 0,
        split: Callable[[str], tuple[str, tuple[Any, ...]]] | None = None,
    ) -> None:
        self.channel = channel
        self.text = text
        self.token_bytes = token_bytes
        self.offset = offset
        self.split = split
        self._pending: list[TokenLogprob] = []
        self._held: list[str] = []

    def on_token(self, token_id: int, logprobs: TokenLogprobs | None = None) -> bool:
        if logprobs is not None and self.token_bytes is not None:
            self._pending.append(self._entry(logprobs, self.offset + self.text.decoded))
        delta = self.text.push(token_id)
        if self.split is not None:
            self._held.append(delta)
        elif delta:
            self._put(delta)
        return self.text.stopped

    def on_finish(self, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        delta = self.text.finish()
        calls: tuple[Any, ...] = ()
        if self.split is not None:
            delta, calls = self.split("".join(self._held) + delta)
            if calls and reason == "stop":  # cut by max_tokens, it stays "length"
                reason = "tool_calls"
        if delta or self._pending:
            self._put(delta)
        finished = Finished(reason, prompt_tokens, completion_tokens, calls)  # type: ignore[arg-type]
        self.channel.put(finished)

    def _put(self, text: str) -> None:
        entries, self._pending = tuple(self._pending), []
        self.channel.put(TextDelta(text, entries))

    def _entry(self, logprobs: TokenLogprobs, offset: int) -> TokenLogprob:
        assert self.token_bytes is not None
        name = self.token_bytes
        raw = name(logprobs.token)
        top = tuple((name(i).decode("utf-8", "replace"), name(i), p) for i, p in logprobs.top)
        return TokenLogprob(raw.decode("utf-8", "replace"), raw, logprobs.logprob, top, offset)

    def on_error(self, error: BaseException) -> None:
        self.channel.fail(error)


class BatchEngine:
    """Serves ``model`` (riftco-nn's incremental-forward interface) with ``tokenizer``
    (riftco-text's). ``cache`` defaults to a `PagedKVCachePool` of ``pages`` pages
    (default: room for every running sequence at full context)."""

    def __init__(
        self,
        model: StepModel,
        tokenizer: Any,
        *,
        model_id: str = "riftco",
        cache: Any = None,
        pages: int | None = None,
        page_size: int = 16,
        limits: SchedulerLimits | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._model_id = model_id
        self.limits = limits or SchedulerLimits()
        config = model.config
        if cache is None:
            per_sequence = -(-config.context_length // page_size)
            pages = pages or per_sequence * self.limits.max_running
            cache = PagedKVCachePool(config, pages=pages, page_size=page_size)
        self.cache = cache
        self.scheduler = Scheduler(model, cache, self.limits)
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._special = frozenset(getattr(tokenizer, "special_tokens", {}).values())
        self._vocab = int(tokenizer.vocab_size)

    # -- Engine -----------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def max_context(self) -> int:
        return int(self.model.config.context_length)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._loop, name="riftco-serve-scheduler", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.scheduler.fail_all(GenerationFailed("the server is shutting down"))

    def submit(self, request: GenerationRequest) -> EventChannel:
        return self.submit_group([request])[0]

    def submit_group(self, requests: Sequence[GenerationRequest]) -> list[EventChannel]:
        """Queue the choices of one request together (or none: `Overloaded`). A choice
        whose prompt ids equal an earlier one's waits for that one's prefill and then
        shares its full prompt pages (the prompt is computed once per page)."""
        if self._stop.is_set():
            raise RequestError("The server is shutting down", status=503, code="shutting_down")
        loop = asyncio.get_running_loop()
        leaders: dict[tuple[int, ...], SequenceState] = {}
        seqs: list[SequenceState] = []
        channels: list[EventChannel] = []
        for request in requests:
            prompt, chat, dropped = self._encode(request)
            options = self._sampling(request.options, chat)
            constraint = self._constraint(request)
            request_id = next(self._ids)
            channel = EventChannel(loop, on_close=partial(self._cancel, request_id))
            channel.dropped_messages = dropped
            echo = self._echo_text(request, prompt) if request.echo else ""
            text = TextStream(self.tokenizer.token_bytes, request.stop, skip=self._special)
            tools = request.tools
            sink = ChannelSink(
                channel,
                text,
                self.tokenizer.token_bytes if options.logprobs is not None else None,
                offset=len(echo),
                split=None if tools is None else partial(tools.split, tokenizer=self.tokenizer),
            )
            key = tuple(prompt)
            seq = SequenceState(
                request_id, prompt, options, sink, constraint=constraint, leader=leaders.get(key)
            )
            leaders.setdefault(key, seq)
            seqs.append(seq)
            channels.append(channel)
            if echo:
                channel.put(TextDelta(echo, echo=True))
        self.scheduler.submit_many(seqs)
        self._wake.set()
        return channels

    def stats(self) -> EngineStats:
        s = self.scheduler
        return EngineStats(
            waiting=s.waiting,
            running=s.running,
            pages_in_use=int(getattr(self.cache, "pages_in_use", 0)),
            pages_total=int(getattr(self.cache, "pages", 0)),
            prompt_tokens_total=s.prompt_tokens_total,
            generated_tokens_total=s.generated_tokens_total,
            requests_finished_total=s.finished_total,
            requests_rejected_total=s.rejected_total,
            tokens_per_second=s.tokens_per_second(),
        )

    # -- helpers ----------------------------------------------------------------
    def _sampling(self, options: SamplingConfig, chat: bool) -> SamplingConfig:
        """The request's options with the tokenizer's stop ids (``stop_ids(chat)``)
        added and the draw limited to the tokenizer's ids (a padded vocabulary)."""
        stops = tuple(dict.fromkeys((*options.stop_ids, *self.tokenizer.stop_ids(chat))))
        limit = min(self._vocab, options.vocab_limit or self._vocab)
        outside = [t for t, _ in options.logit_bias if t >= limit]
        if outside:
            raise RequestError(
                f"'logit_bias' names token {outside[0]}; this model's tokens are 0..{limit - 1}",
                param="logit_bias",
                code="invalid_logit_bias",
            )
        return dataclasses.replace(options, stop_ids=stops, vocab_limit=limit)

    def prepare(self, requests: Sequence[GenerationRequest]) -> None:
        """Compile the requests' constraints (grammars) now: the server calls it in a
        worker thread before ``submit_group``; a refused schema raises `RequestError`."""
        seen: set[int] = set()
        for request in requests:
            for factory in (request.constraint, request.tools):
                prepare = getattr(factory, "prepare", None)
                if prepare is not None and id(factory) not in seen:
                    seen.add(id(factory))
                    prepare(self.tokenizer)

    def _constraint(self, request: GenerationRequest) -> Any:
        """The request's constraint, built from its factory over this tokenizer."""
        if request.constraint is None:
            return None
        try:
            return request.constraint(self.tokenizer)
        except RequestError:
            raise
        except Exception as exc:  # the grammar refused the schema (or the vocabulary)
            raise RequestError(
                f"Cannot build the output constraint: {exc}", param="response_format"
            ) from None

    def _echo_text(self, request: GenerationRequest, prompt: list[int]) -> str:
        if isinstance(request.prompt, str):
            return request.prompt
        return str(self.tokenizer.decode(prompt))

    def _model_vocab(self) -> int:
        return int(self.model.config.vocab_size)

    def _encode(self, request: GenerationRequest) -> tuple[list[int], bool, int]:
        """The prompt ids, whether they are a chat, and how many turns were dropped."""
        tok = self.tokenizer
        try:
            if request.messages is not None:
                tools = request.tools
                offer = [] if tools is None or not tools.offered else [tools.system_message(tok)]

                def encode(messages: Sequence[ChatMessage]) -> list[int]:
                    turns: list[dict[str, Any]] = [
                        {"role": "system", "content": text} for text in offer
                    ]
                    for m in messages:
                        turn: dict[str, Any] = {"role": m.role, "content": m.content}
                        if m.tool_calls is not None:
                            turn["tool_calls"] = list(m.tool_calls)
                        turns.append(turn)
                    return list(tok.apply_chat_template(turns, add_generation_prompt=True).ids)

                if not request.truncate:
                    return encode(request.messages), True, 0
                context = self.max_context
                ids, dropped = fit_chat(
                    request.messages, encode, context, request.options.max_new_tokens
                )
                return ids, True, dropped
            if isinstance(request.prompt, tuple):
                ids = list(request.prompt)
                limit = self._model_vocab()
                bad = [t for t in ids if not 0 <= t < limit]
                if bad:
                    raise RequestError(
                        f"Token id {bad[0]} is outside this model's vocabulary (0..{limit - 1})",
                        param="prompt",
                        code="invalid_token",
                    )
                return ids, False, 0
            return list(tok.encode(request.prompt or "")), False, 0
        except RequestError:
            raise
        except Exception as exc:  # the tokenizer refused the text or the chat
            raise RequestError(
                f"Cannot encode the prompt: {exc}",
                param="messages" if request.messages is not None else "prompt",
            ) from None

    def _cancel(self, request_id: int) -> None:
        self.scheduler.cancel(request_id)
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                busy = self.scheduler.step()
            except Exception:  # keep serving; the step's requests were failed
                log.exception("scheduler step failed")
                busy = False
            if not busy:
                self._wake.wait(timeout=0.1)


__all__ = ["BatchEngine", "ChannelSink"]
