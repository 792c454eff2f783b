"""Token-level generation shared by training, bundles and serving: greedy (ties to
the lowest id), temperature, top-k and top-p sampling, seeded per sequence, a
repetition penalty, a vocabulary limit, stop ids and a token budget, over a
key/value cache."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riftco.nn.cache import ContiguousKVCache
from riftco.nn.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens and when to stop; ``None`` disables a filter or a limit.

    ``temperature`` 0 is greedy. ``top_k`` keeps the k most likely tokens, ``top_p``
    the smallest most-likely set whose probability reaches p (both after temperature;
    ties broken toward lower ids). ``seed`` seeds sequence j's generator with
    ``SeedSequence([seed, j])`` (PCG64); None draws fresh entropy.
    ``repetition_penalty`` > 1 divides the positive (multiplies the negative) logits
    of every token already in the sequence, prompt included; 1 disables it.
    ``vocab_limit`` restricts the draw to ids below it (a model whose vocabulary is
    padded beyond its tokenizer's). Generation stops at any of ``stop_ids`` (not
    included in the tokens) or after ``max_new_tokens``."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_ids: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    vocab_limit: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise ConfigError(
                f"SamplingConfig.max_new_tokens must be a non-negative int, found "
                f"{self.max_new_tokens!r}"
            )
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(
                f"SamplingConfig.temperature must be >= 0, found {self.temperature!r}"
            )
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k <= 0):
            raise ConfigError(
                f"SamplingConfig.top_k must be None or a positive int, found {self.top_k!r}"
            )
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ConfigError(
                f"SamplingConfig.top_p must be None or in (0, 1], found {self.top_p!r}"
            )
        penalty = self.repetition_penalty
        if isinstance(penalty, bool) or not np.isfinite(penalty) or penalty <= 0:
            raise ConfigError(
                f"SamplingConfig.repetition_penalty must be a finite number > 0, found {penalty!r}"
            )
        limit = self.vocab_limit
        if limit is not None and (not isinstance(limit, int) or limit <= 0):
            raise ConfigError(
                f"SamplingConfig.vocab_limit must be None or a positive int, found {limit!r}"
            )
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))


@dataclass(frozen=True)
class GenerationResult:
    """The new tokens of one sequence and why generation ended: ``stop`` (a stop id was
    drawn; it is not in ``tokens``) or ``length`` (``max_new_tokens`` was reached)."""

    tokens: list[int]
    finish_reason: str


def sequence_rng(seed: int | None, index: int) -> np.random.Generator:
    """The generator of sequence ``index`` for ``SamplingConfig.seed``."""
    if seed is None:
        return np.random.Generator(np.random.PCG64())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(index)])))


def sample_next(
    logits: Any,
    config: SamplingConfig,
    rng: np.random.Generator | None = None,
    seen: Iterable[int] = (),
) -> int:
    """The next token from one row of logits ``[vocab]`` (a numpy array or a Tensor).

    The row is first cut to ``config.vocab_limit`` ids, then the repetition penalty
    applies to the ids in ``seen`` (in the logits' own precision). Greedy when
    ``temperature`` is 0 (the lowest id among equal maxima). Otherwise the logits are
    divided by the temperature, restricted by ``top_k`` then ``top_p``, and one token
    is drawn: with ``u = rng.random()``, the first kept id (in id order) whose
    cumulative probability exceeds ``u``, computed in float64."""
    row = np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits).reshape(-1)
    limit = config.vocab_limit
    if limit is not None and limit < row.shape[0]:
        row = row[:limit]
    if config.repetition_penalty != 1.0:
        row = _penalize(row, seen, config.repetition_penalty)
    row = np.asarray(row, dtype=np.float64)
    if config.temperature == 0.0:
        return int(np.argmax(row))
    if rng is None:
        raise ConfigError("sample_next: sampling with a temperature needs a generator")
    scaled = row / config.temperature
    if config.top_k is None and config.top_p is None:
        # Every id is kept, in id order: no ranking needed (the same draw as below).
        probs = np.exp(scaled - scaled.max())
        cumulative = np.cumsum(probs) / probs.sum()
        u = rng.random()
        return min(int(np.searchsorted(cumulative, u, side="right")), len(probs) - 1)
    # Rank by descending logit, ties toward lower ids (a stable sort of -logit).
    order = np.argsort(-scaled, kind="stable")
    keep = len(order)
    if config.top_k is not None:
        keep = min(keep, config.top_k)
    shifted = scaled - scaled[order[0]]
    probs = np.exp(shifted)
    if config.top_p is not None:
        ranked = probs[order[:keep]]
        cumulative = np.cumsum(ranked) / ranked.sum()
        keep = min(keep, int(np.searchsorted(cumulative, config.top_p - 1e-12)) + 1)
    kept = np.sort(order[:keep])
    weights = probs[kept]
    cumulative = np.cumsum(weights) / weights.sum()
    u = rng.random()
    return int(kept[min(int(np.searchsorted(cumulative, u, side="right")), len(kept) - 1)])


def _penalize(row: np.ndarray, seen: Iterable[int], penalty: float) -> np.ndarray:
    ids = np.fromiter(seen, dtype=np.int64)
    ids = ids[(ids >= 0) & (ids < row.shape[0])]
    if ids.size == 0:
        return row
    row = np.array(row, dtype=np.result_type(row.dtype, np.float32))
    picked = row[ids]
    row[ids] = np.where(picked > 0, picked / penalty, picked * penalty)
    return row


class TokenSampler:
    """One sequence's draws under ``config``: its generator (``sequence_rng(seed,
    index)``) and the tokens the repetition penalty sees. ``observe`` the prompt,
    then each token the sequence keeps; calling the sampler on a row of logits
    returns the next token."""

    def __init__(self, config: SamplingConfig, index: int = 0) -> None:
        self.config = config
        self.rng = sequence_rng(config.seed, index)
        self.seen: set[int] = set()

    def observe(self, tokens: Iterable[int]) -> None:
        """Tokens now in the sequence (kept only while a repetition penalty is on)."""
        if self.config.repetition_penalty != 1.0:
            self.seen.update(int(t) for t in tokens)

    def __call__(self, logits: Any) -> int:
        return sample_next(logits, self.config, self.rng, self.seen)


def replay_tokens(context_length: int) -> int:
    """How many of a sequence's newest tokens are kept when its window slides: half
    the context (at least 1, at most ``context_length - 1``)."""
    return max(1, min(context_length // 2, context_length - 1))


def generate(
    model: Any, prompts: Sequence[Sequence[int]], config: SamplingConfig
) -> list[GenerationResult]:
    """Continue each prompt (a non-empty list of token ids) with ``model``, batching all
    sequences in one forward per step over a contiguous key/value cache: one prefill
    of the ragged prompts, then one token per unfinished sequence per step.

    A sequence that fills the context slides its window as the server does: its
    cache is dropped and its newest ``replay_tokens(context_length)`` tokens (half
    the context) are replayed from position 0, so generation runs on to
    ``max_new_tokens`` or a stop id."""
    prompts = [list(map(int, p)) for p in prompts]
    c = model.config
    for j, p in enumerate(prompts):
        if not p:
            raise ConfigError(f"generate: prompt {j} is empty")
        if min(p) < 0 or max(p) >= c.vocab_size:
            raise ConfigError(f"generate: prompt {j} has a token outside 0..{c.vocab_size - 1}")
        c.check_length(len(p))
    if not prompts:
        return []
    samplers = [TokenSampler(config, j) for j in range(len(prompts))]
    for sampler, prompt in zip(samplers, prompts):
        sampler.observe(prompt)
    out: list[list[int]] = [[] for _ in prompts]
    reasons: list[str | None] = [None] * len(prompts)
    if config.max_new_tokens == 0:
        return [GenerationResult([], "length") for _ in prompts]
    cache = ContiguousKVCache(c, max_sequences=len(prompts), backend=model.backend)
    ids = [cache.add_sequence() for _ in prompts]
    active = list(range(len(prompts)))
    feed = prompts
    stops = set(config.stop_ids)
    replay = replay_tokens(cache.capacity)
    while active:
        logits = model.forward_incremental(feed, cache, [ids[j] for j in active]).numpy()
        still, feed = [], []
        for row, j in enumerate(active):
            token = samplers[j](logits[row])
            if token in stops:
                reasons[j] = "stop"
                continue
            out[j].append(token)
            samplers[j].observe((token,))
            if len(out[j]) >= config.max_new_tokens:
                reasons[j] = "length"
                continue
            still.append(j)
            if cache.length(ids[j]) >= cache.capacity:
                cache.remove(ids[j])
                ids[j] = cache.add_sequence()
                feed.append([*prompts[j], *out[j]][-replay:])
            else:
                feed.append([token])
        active = still
    return [GenerationResult(tokens, reason or "length") for tokens, reason in zip(out, reasons)]


__all__ = [
    "GenerationResult",
    "SamplingConfig",
    "TokenSampler",
    "generate",
    "replay_tokens",
    "sample_next",
    "sequence_rng",
]
