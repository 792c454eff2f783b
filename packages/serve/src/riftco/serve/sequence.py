"""One request as the scheduler sees it: prompt ids, the tokens generated so far,
its sampler, its stopping rules, and the sink that receives its tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from riftco.nn import SamplingConfig, TokenLogprobs, TokenSampler


class TokenSink(Protocol):
    """Where a sequence's results go (called on the scheduler's thread)."""

    def on_token(self, token_id: int, logprobs: TokenLogprobs | None = None) -> bool:
        """A generated token (with its log-probabilities when the options ask for
        them); return True to stop here (a stop string matched)."""
        ...

    def on_finish(self, reason: str, prompt_tokens: int, completion_tokens: int) -> None: ...

    def on_error(self, error: BaseException) -> None: ...


@dataclass(eq=False)
class SequenceState:
    """A request inside the scheduler. ``pending`` holds the tokens the next forward
    feeds (the uncached part of the prompt, then the last generated token).

    ``sampler`` defaults to riftco-nn's `TokenSampler` over ``options`` (its
    generator seeded as sequence 0 of ``options.seed``; the repetition penalty sees
    the prompt and every kept token). ``stop_ids`` adds to ``options.stop_ids``.
    ``constraint`` (riftco-nn's ``Constraint``) masks the draws.

    ``leader``: another choice of the same prompt; this one is admitted only once
    the leader's prompt is in the cache (``prefilled``), so it shares the leader's
    full prompt pages instead of computing them again."""

    request_id: int
    prompt: list[int]
    options: SamplingConfig
    sink: TokenSink
    stop_ids: frozenset[int] = frozenset()
    sampler: TokenSampler | None = None
    output: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    cache_id: int | None = None
    resets: int = 0
    constraint: Any = None
    leader: SequenceState | None = None
    prefilled: bool = False

    def __post_init__(self) -> None:
        self.stop_ids = frozenset(self.stop_ids) | frozenset(self.options.stop_ids)
        if self.sampler is None:
            self.sampler = TokenSampler(self.options, 0, self.constraint)
        self.sampler.observe(self.prompt)

    @property
    def ready(self) -> bool:
        """Whether it may be admitted (its leader, if any, has been prefilled)."""
        return self.leader is None or self.leader.prefilled

    @property
    def tokens(self) -> list[int]:
        """The prompt and everything generated, in order."""
        return self.prompt + self.output

    @property
    def reserve_tokens(self) -> int:
        """Positions this sequence may occupy, as far as it can tell now."""
        return len(self.prompt) + self.options.max_new_tokens - len(self.output)


__all__ = ["SequenceState", "TokenSink"]
