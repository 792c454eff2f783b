"""Continuous batching: requests join the running batch between steps, finished
ones leave, and every step is one batched forward over all running sequences
(new prompts prefilled whole, the others one token each).

Admission is first come, first served. A request is admitted when there is a
free place in the batch and the cache can reserve the positions it may use
(prompt plus ``max_new_tokens``, at most the context); otherwise it waits. When the
waiting queue is full, ``submit`` raises `Overloaded` (HTTP 429), so a full
server refuses new work instead of stalling or corrupting the running batch.

Context limit: when a sequence's next token would not fit the model's context,
its cache is dropped and its newest ``replay_tokens`` tokens (default: half the
context) are prefilled again from position 0, and decoding continues. The same
rule holds for learned and rotary positions.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from riftco.serve.errors import GenerationFailed, Overloaded, PoolExhausted, RequestError
from riftco.serve.sequence import SequenceState


class StepModel(Protocol):
    """The model-step interface (riftco-nn's ``DecoderOnlyTransformer`` has it):
    ``config.context_length``, ``config.vocab_size`` and one incremental forward
    that appends each sequence's tokens to the cache and returns the logits of
    each sequence's last new token ``[n, vocab]``."""

    config: Any

    def forward_incremental(
        self, tokens: Sequence[Sequence[int]], cache: Any, seq_ids: Sequence[int]
    ) -> Any: ...


@dataclass(frozen=True)
class SchedulerLimits:
    """``max_running`` sequences per step; ``max_waiting`` queued requests before
    `Overloaded`; ``max_step_tokens`` prompt tokens prefilled per step (a longer
    prompt still runs, alone); ``replay_tokens`` kept on a context reset."""

    max_running: int = 16
    max_waiting: int = 64
    max_step_tokens: int = 4096
    replay_tokens: int | None = None
    retry_after: float = 1.0


class Scheduler:
    """Runs sequences on ``model`` over ``cache``; ``step`` is called by one thread,
    ``submit`` and ``cancel`` from any."""

    def __init__(self, model: StepModel, cache: Any, limits: SchedulerLimits | None = None) -> None:
        self.model = model
        self.cache = cache
        self.limits = limits or SchedulerLimits()
        self.context = int(model.config.context_length)
        replay = self.limits.replay_tokens or max(self.context // 2, 1)
        self.replay_tokens = min(replay, self.context - 1) if self.context > 1 else 1
        self._lock = threading.Lock()
        self._waiting: deque[SequenceState] = deque()
        self._cancelled: set[int] = set()
        self._running: list[SequenceState] = []
        self.forwards = 0
        self.prompt_tokens_total = 0
        self.generated_tokens_total = 0
        self.finished_total = 0
        self.rejected_total = 0
        self._recent: deque[tuple[float, int]] = deque()

    # -- from any thread --------------------------------------------------------
    def submit(self, seq: SequenceState) -> None:
        """Queue a sequence; raises `Overloaded` when the queue is full."""
        self.submit_many([seq])

    def submit_many(self, seqs: Sequence[SequenceState]) -> None:
        """Queue several sequences (the choices of one request) together, or none of
        them: `Overloaded` when the queue has no room for all."""
        for seq in seqs:
            self._check(seq)
        with self._lock:
            if len(self._waiting) + len(seqs) > self.limits.max_waiting:
                self.rejected_total += 1
                raise Overloaded(
                    f"The server is busy ({len(self._waiting)} requests queued, "
                    f"{len(self._running)} running); retry later",
                    retry_after=self.limits.retry_after,
                )
            self._waiting.extend(seqs)

    def _check(self, seq: SequenceState) -> None:
        if not seq.prompt:
            raise RequestError("The prompt is empty", param="prompt")
        if len(seq.prompt) > self.context:
            raise RequestError(
                f"The prompt has {len(seq.prompt)} tokens; this model's context holds "
                f"{self.context}",
                param="prompt",
                code="context_length_exceeded",
            )

    def cancel(self, request_id: int) -> None:
        """Stop a request (its client went away); its cache pages are freed."""
        with self._lock:
            self._cancelled.add(request_id)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def has_work(self) -> bool:
        return bool(self._running or self._waiting or self._cancelled)

    def tokens_per_second(self, window: float = 5.0) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in list(self._recent) if now - t <= window]
        if not recent:
            return 0.0
        span = max(now - recent[0][0], 1e-3)
        return sum(n for _, n in recent) / span

    # -- the scheduler thread ---------------------------------------------------
    def step(self) -> bool:
        """Admit what fits, run one forward, hand out one token per sequence.
        Returns False when there was nothing to run."""
        self._drop_cancelled()
        self._admit()
        if not self._running:
            return False
        batch = list(self._running)
        for seq in batch:
            if self.cache.length(seq.cache_id) + len(seq.pending) > self.context:
                self._reset(seq)
        batch = [seq for seq in batch if seq in self._running]
        if not batch:
            return True
        seq_ids: list[int] = []
        for seq in batch:
            assert seq.cache_id is not None  # every running sequence holds a cache entry
            seq_ids.append(seq.cache_id)
        try:
            logits = self.model.forward_incremental(
                [seq.pending for seq in batch], self.cache, seq_ids
            )
            rows = np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits)
        except Exception as exc:
            self.cache.rollback()
            failure = GenerationFailed(f"a model step failed: {type(exc).__name__}: {exc}")
            failure.__cause__ = exc
            for seq in batch:
                self._leave(seq)
                seq.sink.on_error(failure)
            return True
        self.forwards += 1
        self.prompt_tokens_total += sum(len(s.pending) for s in batch if not s.output)
        for seq in batch:
            seq.prefilled = True
        for seq, row in zip(batch, rows):
            self._advance(seq, row)
        self._recent.append((time.monotonic(), len(batch)))
        while len(self._recent) > 512:
            self._recent.popleft()
        return True

    def _advance(self, seq: SequenceState, row: np.ndarray) -> None:
        sampler = seq.sampler
        assert sampler is not None
        try:
            token = sampler.draw(row)
        except Exception as exc:  # a constraint that fails ends its own request only
            self._leave(seq)
            seq.sink.on_error(GenerationFailed(f"sampling failed: {exc}"))
            return
        if token is None or token in seq.stop_ids:  # None: the constraint is complete
            self._finish(seq, "stop")
            return
        seq.output.append(token)
        self.generated_tokens_total += 1
        try:
            sampler.accept(token)
            logprobs = sampler.last if seq.options.logprobs is not None else None
            if logprobs is None:
                stop_here = seq.sink.on_token(token)
            else:
                stop_here = seq.sink.on_token(token, logprobs)
        except Exception as exc:  # a broken sink ends its own request only
            self._leave(seq)
            seq.sink.on_error(exc)
            return
        if stop_here:
            self._finish(seq, "stop")
        elif len(seq.output) >= seq.options.max_new_tokens:
            self._finish(seq, "length")
        else:
            seq.pending = [token]

    def _admit(self) -> None:
        budget = self.limits.max_step_tokens
        while len(self._running) < self.limits.max_running:
            with self._lock:
                if not self._waiting:
                    return
                seq = self._waiting[0]
                if self._running and len(seq.prompt) > budget:
                    return
                if not seq.ready:
                    return  # first in line, until its leader's prompt is cached
                reserve = min(len(seq.prompt) + seq.options.max_new_tokens, self.context)
                try:
                    seq.cache_id = self.cache.add_sequence(
                        reserve_tokens=reserve, prompt=seq.prompt
                    )
                except PoolExhausted:
                    return  # it waits, first in line, for pages to come back
                self._waiting.popleft()
            seq.pending = seq.prompt[self.cache.length(seq.cache_id) :]
            budget -= len(seq.pending)
            self._running.append(seq)

    def _drop_cancelled(self) -> None:
        with self._lock:
            if not self._cancelled:
                return
            cancelled, self._cancelled = self._cancelled, set()
            waiting = [s for s in self._waiting if s.request_id in cancelled]
            for seq in waiting:
                self._waiting.remove(seq)
                seq.prefilled = True  # its followers no longer wait for it
        for seq in [s for s in self._running if s.request_id in cancelled]:
            self._leave(seq)

    def _reset(self, seq: SequenceState) -> None:
        """Replay the newest tokens from position 0 (the context is full)."""
        replay = seq.tokens[-self.replay_tokens :]
        self.cache.remove(seq.cache_id)
        remaining = seq.options.max_new_tokens - len(seq.output)
        try:
            seq.cache_id = self.cache.add_sequence(
                reserve_tokens=min(len(replay) + remaining, self.context), prompt=replay
            )
        except PoolExhausted:
            seq.cache_id = None
            self._finish(seq, "length")
            return
        seq.pending = replay[self.cache.length(seq.cache_id) :]
        seq.resets += 1

    def _leave(self, seq: SequenceState) -> None:
        seq.prefilled = True
        if seq in self._running:
            self._running.remove(seq)
        if seq.cache_id is not None:
            self.cache.remove(seq.cache_id)
            seq.cache_id = None

    def _finish(self, seq: SequenceState, reason: str) -> None:
        self._leave(seq)
        self.finished_total += 1
        try:
            seq.sink.on_finish(reason, len(seq.prompt), len(seq.output))
        except Exception as exc:
            seq.sink.on_error(exc)

    def fail_all(self, error: BaseException) -> None:
        """End every request with ``error`` (the engine is closing)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), deque()
        for seq in list(self._running) + waiting:
            self._leave(seq)
            seq.sink.on_error(error)


__all__ = ["Scheduler", "SchedulerLimits", "StepModel"]
