"""One request as the scheduler sees it: prompt ids, the tokens generated so far,
its sampler, its stopping rules, and the sink that receives its tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from riftco.nn import SamplingConfig, sample_next, sequence_rng
from riftco.serve.engine import SamplingOptions


class TokenSink(Protocol):
    """Where a sequence's results go (called on the scheduler's thread)."""

    def on_token(self, token_id: int) -> bool:
        """A generated token; return True to stop here (a stop string matched)."""
        ...

    def on_finish(self, reason: str, prompt_tokens: int, completion_tokens: int) -> None: ...

    def on_error(self, error: BaseException) -> None: ...


class TokenSampler:
    """riftco-nn's sampler (greedy, temperature, top-k, top-p; a generator seeded per
    request) after an optional repetition penalty over the sequence's tokens."""

    def __init__(self, options: SamplingOptions, vocab_limit: int | None = None) -> None:
        self.vocab_limit = vocab_limit
        self.config = SamplingConfig(
            max_new_tokens=options.max_tokens,
            temperature=options.temperature,
            top_k=options.top_k or None,
            top_p=options.top_p if options.top_p < 1.0 else None,
            seed=options.seed,
        )
        self.rng = sequence_rng(options.seed, 0)
        self.penalty = options.repetition_penalty
        self._seen: set[int] = set()

    def observe(self, tokens: list[int]) -> None:
        """Tokens the repetition penalty applies to (the prompt, then each new token)."""
        if self.penalty != 1.0:
            self._seen.update(tokens)

    def __call__(self, logits: np.ndarray) -> int:
        row = logits
        limit = self.vocab_limit
        if limit is not None and limit < row.shape[0]:
            row = np.array(row[:limit], dtype=np.float32)
        if self.penalty != 1.0 and self._seen:
            row = np.array(row, dtype=np.float32)
            ids = np.fromiter(self._seen, dtype=np.int64)
            ids = ids[ids < row.shape[0]]
            picked = row[ids]
            row[ids] = np.where(picked > 0, picked / self.penalty, picked * self.penalty)
        return sample_next(row, self.config, self.rng)


@dataclass(eq=False)
class SequenceState:
    """A request inside the scheduler. ``pending`` holds the tokens the next forward
    feeds (the uncached part of the prompt, then the last generated token)."""

    request_id: int
    prompt: list[int]
    options: SamplingOptions
    sink: TokenSink
    stop_ids: frozenset[int] = frozenset()
    sampler: TokenSampler | None = None
    output: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    cache_id: int | None = None
    resets: int = 0

    def __post_init__(self) -> None:
        if self.sampler is None:
            self.sampler = TokenSampler(self.options)
        self.sampler.observe(self.prompt)

    @property
    def tokens(self) -> list[int]:
        """The prompt and everything generated, in order."""
        return self.prompt + self.output

    @property
    def reserve_tokens(self) -> int:
        """Positions this sequence may occupy, as far as it can tell now."""
        return len(self.prompt) + self.options.max_tokens - len(self.output)


__all__ = ["SequenceState", "TokenSampler", "TokenSink"]
