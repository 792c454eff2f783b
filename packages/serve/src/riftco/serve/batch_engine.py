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
from typing import Any

from riftco.nn import SamplingConfig
from riftco.serve.caches import PagedKVCachePool
from riftco.serve.channel import EventChannel
from riftco.serve.engine import EngineStats, Finished, GenerationRequest, TextDelta
from riftco.serve.errors import GenerationFailed, RequestError
from riftco.serve.scheduler import Scheduler, SchedulerLimits, StepModel
from riftco.serve.sequence import SequenceState
from riftco.serve.text_stream import TextStream

log = logging.getLogger("riftco.serve")


class ChannelSink:
    """Turns a sequence's tokens into `TextDelta` events (stop strings applied)."""

    def __init__(self, channel: EventChannel, text: TextStream) -> None:
        self.channel = channel
        self.text = text

    def on_token(self, token_id: int) -> bool:
        delta = self.text.push(token_id)
        if delta:
            self.channel.put(TextDelta(delta))
        return self.text.stopped

    def on_finish(self, reason: str, prompt_tokens: int, completion_tokens: int) -> None:
        delta = self.text.finish()
        if delta:
            self.channel.put(TextDelta(delta))
        self.channel.put(Finished(reason, prompt_tokens, completion_tokens))  # type: ignore[arg-type]

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
        if self._stop.is_set():
            raise RequestError("The server is shutting down", status=503, code="shutting_down")
        prompt, chat = self._encode(request)
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        channel = EventChannel(loop, on_close=lambda: self._cancel(request_id))
        text = TextStream(self.tokenizer.token_bytes, request.stop, skip=self._special)
        seq = SequenceState(
            request_id, prompt, self._sampling(request.options, chat), ChannelSink(channel, text)
        )
        self.scheduler.submit(seq)
        self._wake.set()
        return channel

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
        return dataclasses.replace(options, stop_ids=stops, vocab_limit=limit)

    def _model_vocab(self) -> int:
        return int(self.model.config.vocab_size)

    def _encode(self, request: GenerationRequest) -> tuple[list[int], bool]:
        tok = self.tokenizer
        try:
            if request.messages is not None:
                messages = [{"role": m.role, "content": m.content} for m in request.messages]
                return list(tok.apply_chat_template(messages, add_generation_prompt=True).ids), True
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
                return ids, False
            return list(tok.encode(request.prompt or "")), False
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
