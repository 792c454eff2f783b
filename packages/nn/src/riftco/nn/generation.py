"""Token-level generation shared by training, bundles and serving: greedy (ties to
the lowest id), temperature, top-k and top-p sampling, seeded per sequence, the
repetition, presence and frequency penalties, a logit bias, a constraint that masks
ids (structured output), log-probabilities, a vocabulary limit, stop ids and a
token budget, over decode sessions (`riftco.nn.session`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from riftco.nn.cache import ContiguousKVCache
from riftco.nn.errors import ConfigError

#: The most ``top_logprobs`` a draw reports (OpenAI's limit).
MAX_TOP_LOGPROBS = 20
#: The range of one ``logit_bias`` entry (OpenAI's).
LOGIT_BIAS_RANGE = (-100.0, 100.0)
#: The range of ``presence_penalty`` and ``frequency_penalty`` (OpenAI's).
PENALTY_RANGE = (-2.0, 2.0)


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens and when to stop; ``None`` disables a filter or a limit.

    ``temperature`` 0 is greedy. ``top_k`` keeps the k most likely tokens, ``top_p``
    the smallest most-likely set whose probability reaches p (both after temperature;
    ties broken toward lower ids). ``seed`` seeds sequence j's generator with
    ``SeedSequence([seed, j])`` (PCG64); None draws fresh entropy.
    ``repetition_penalty`` > 1 divides the positive (multiplies the negative) logits
    of every token already in the sequence, prompt included; 1 disables it.
    ``presence_penalty`` and ``frequency_penalty`` (OpenAI's, each in [-2, 2]) subtract
    ``presence * (count[t] > 0) + frequency * count[t]`` from token t's logit, where
    ``count`` counts the tokens generated so far (the prompt is not counted, as in
    OpenAI's API and vLLM). ``logit_bias`` maps token ids to a bias in [-100, 100]
    added to their logits (after the penalties, before temperature); it is kept as
    sorted ``(id, bias)`` pairs. ``logprobs`` (None, or 0..20) asks each draw for the
    chosen token's log-probability and the ``logprobs`` most likely tokens' (see
    `TokenLogprobs`). ``vocab_limit`` restricts the draw to ids below it (a model
    whose vocabulary is padded beyond its tokenizer's). Generation stops at any of
    ``stop_ids`` (not included in the tokens) or after ``max_new_tokens``.

    The fields that are off by default (penalties 0, no bias, no logprobs) leave the
    draws of every other configuration bit-identical."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_ids: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    vocab_limit: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Any = ()
    logprobs: int | None = None

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
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            lo, hi = PENALTY_RANGE
            if not _is_number(value) or not lo <= value <= hi:
                raise ConfigError(
                    f"SamplingConfig.{name} must be a number in [{lo}, {hi}], found {value!r}"
                )
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        top = self.logprobs
        if top is not None and (type(top) is not int or not 0 <= top <= MAX_TOP_LOGPROBS):
            raise ConfigError(
                f"SamplingConfig.logprobs must be None or an int in 0..{MAX_TOP_LOGPROBS}, "
                f"found {top!r}"
            )
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))

    @property
    def counts_tokens(self) -> bool:
        """Whether the presence or frequency penalty is on (the sampler counts tokens)."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _bias_pairs(value: Any) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as sorted ``(id, bias)`` pairs, each checked."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    else:
        raise ConfigError(
            f"SamplingConfig.logit_bias must be a mapping of token id to bias, found "
            f"{type(value).__name__}"
        )
    out: dict[int, float] = {}
    lo, hi = LOGIT_BIAS_RANGE
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ConfigError(
                f"SamplingConfig.logit_bias entries must be (token id, bias) pairs, found {item!r}"
            )
        token, bias = item
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or token < 0:
            raise ConfigError(
                f"SamplingConfig.logit_bias keys must be non-negative token ids, found {token!r}"
            )
        if not _is_number(bias) or not lo <= bias <= hi:
            raise ConfigError(
                f"SamplingConfig.logit_bias[{int(token)}] must be a number in [{lo}, {hi}], "
                f"found {bias!r}"
            )
        out[int(token)] = float(bias)
    return tuple(sorted(out.items()))


@runtime_checkable
class Constraint(Protocol):
    """What may come next in one sequence (a grammar's state, for structured output).

    ``allowed()`` is a numpy bool array over token ids (ids past its end are not
    allowed) or a sequence of the allowed ids; ``advance(token_id)`` moves past a
    token the sequence kept. Stop ids are allowed only when the mask allows them, so
    a constraint decides where its document may end."""

    def allowed(self) -> Any: ...

    def advance(self, token_id: int) -> Any: ...


@dataclass(frozen=True)
class TokenLogprobs:
    """One draw's log-probabilities: the chosen ``token``'s ``logprob`` and the ``top``
    most likely ``(id, logprob)`` pairs (descending, ties toward lower ids; as many as
    ``SamplingConfig.logprobs`` asks).

    They are ``log_softmax`` (float64) of the model's logits as it computed them,
    over the ids below ``vocab_limit``: before the penalties, the bias, the constraint
    and the temperature (vLLM's default, ``raw_logprobs``; OpenAI reports the model's
    distribution too)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class GenerationResult:
    """The new tokens of one sequence and why generation ended: ``stop`` (a stop id was
    drawn; it is not in ``tokens``) or ``length`` (``max_new_tokens`` was reached).
    ``logprobs`` holds one `TokenLogprobs` per token when the config asked for them."""

    tokens: list[int]
    finish_reason: str
    logprobs: list[TokenLogprobs] | None = None


def sequence_rng(seed: int | None, index: int) -> np.random.Generator:
    """The generator of sequence ``index`` for ``SamplingConfig.seed``."""
    if seed is None:
        return np.random.Generator(np.random.PCG64())
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(index)])))


def choice_seed(seed: int | None, choice: int) -> int | None:
    """The seed of choice ``choice`` of ``n`` parallel samples of one prompt:
    ``(seed + choice) mod 2**64`` (vLLM's rule), so choice i of a request seeded s
    draws what a single request seeded s + i draws (None stays None)."""
    if seed is None:
        return None
    return (int(seed) + int(choice)) % (1 << 64)


def log_softmax(row: Any) -> np.ndarray:
    """``log_softmax`` of one row of logits, in float64."""
    x = np.asarray(row, dtype=np.float64)
    top = float(np.max(x))
    return x - (top + math.log(float(np.sum(np.exp(x - top)))))


def token_logprobs(
    logits: Any, token: int, top: int, vocab_limit: int | None = None
) -> TokenLogprobs:
    """The `TokenLogprobs` of ``token`` under one row of logits (cut to ``vocab_limit``)."""
    row = _row(logits, vocab_limit)
    logp = log_softmax(row)
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        order = np.argsort(-logp, kind="stable")[:top]
        best = tuple((int(i), float(logp[i])) for i in order)
    return TokenLogprobs(int(token), float(logp[token]), best)


def _row(logits: Any, limit: int | None) -> np.ndarray:
    row = np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits).reshape(-1)
    if limit is not None and limit < row.shape[0]:
        row = row[:limit]
    return row


def constraint_mask(allowed: Any, width: int) -> np.ndarray:
    """A constraint's ``allowed()`` as a bool mask of ``width`` ids (ids past a shorter
    mask are not allowed; a longer one is cut); a typed error for anything else."""
    if isinstance(allowed, np.ndarray) and allowed.dtype == np.bool_:
        if allowed.ndim != 1:
            raise ConfigError(
                f"constraint: allowed() must be a 1-d bool array, found shape {allowed.shape}"
            )
        mask = np.zeros(width, dtype=bool)
        n = min(width, allowed.shape[0])
        mask[:n] = allowed[:n]
        return mask
    try:
        ids = np.asarray(list(allowed), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"constraint: allowed() must be a bool array or a sequence of token ids, "
            f"found {type(allowed).__name__}"
        ) from None
    mask = np.zeros(width, dtype=bool)
    ids = ids[(ids >= 0) & (ids < width)]
    mask[ids] = True
    return mask


def sample_next(
    logits: Any,
    config: SamplingConfig,
    rng: np.random.Generator | None = None,
    seen: Iterable[int] = (),
    counts: Mapping[int, int] | None = None,
    mask: np.ndarray | None = None,
) -> int:
    """The next token from one row of logits ``[vocab]`` (a numpy array or a Tensor).

    The row is first cut to ``config.vocab_limit`` ids, then the repetition penalty
    applies to the ids in ``seen`` (in the logits' own precision); then, in float64,
    the presence and frequency penalties over ``counts`` (generated token -> count),
    the logit bias, and ``mask`` (a bool array over the row's ids: the others become
    -inf). Greedy when ``temperature`` is 0 (the lowest id among equal maxima).
    Otherwise the logits are divided by the temperature, restricted by ``top_k`` then
    ``top_p``, and one token is drawn: with ``u = rng.random()``, the first kept id (in
    id order) whose cumulative probability exceeds ``u``, computed in float64."""
    row = _row(logits, config.vocab_limit)
    if config.repetition_penalty != 1.0:
        row = _penalize(row, seen, config.repetition_penalty)
    row = np.asarray(row, dtype=np.float64)
    if (counts and config.counts_tokens) or config.logit_bias:
        row = _adjust(row, config, counts or {})
    if mask is not None:
        if mask.shape != row.shape:
            raise ConfigError(
                f"sample_next: the mask covers {mask.shape[0] if mask.ndim else 0} ids, "
                f"the row {row.shape[0]}"
            )
        if not mask.any():
            raise ConfigError("sample_next: the constraint allows no token")
        row = np.where(mask, row, -np.inf)
    if config.temperature == 0.0:
        return int(np.argmax(row))
    if rng is None:
        raise ConfigError("sample_next: sampling with a temperature needs a generator")
    scaled = row / config.temperature
    if config.top_k is None and config.top_p is None:
        if mask is not None:
            # Only the allowed ids, in id order (a masked id never wins by rounding).
            kept = np.flatnonzero(mask)
            weights = np.exp(scaled[kept] - scaled[kept].max())
            cumulative = np.cumsum(weights) / weights.sum()
            u = rng.random()
            index = min(int(np.searchsorted(cumulative, u, side="right")), len(kept) - 1)
            return int(kept[index])
        # Every id is kept, in id order: no ranking needed (the same draw as below).
        probs = np.exp(scaled - scaled.max())
        cumulative = np.cumsum(probs) / probs.sum()
        u = rng.random()
        return min(int(np.searchsorted(cumulative, u, side="right")), len(probs) - 1)
    # Rank by descending logit, ties toward lower ids (a stable sort of -logit).
    order = np.argsort(-scaled, kind="stable")
    keep = len(order)
    if mask is not None:
        keep = int(mask.sum())  # the masked ids rank last
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


def _adjust(row: np.ndarray, config: SamplingConfig, counts: Mapping[int, int]) -> np.ndarray:
    """Presence and frequency penalties, then the logit bias (float64, a copy)."""
    row = np.array(row, dtype=np.float64)
    width = row.shape[0]
    if counts and config.counts_tokens:
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        n = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        inside = (ids >= 0) & (ids < width)
        ids, n = ids[inside], n[inside]
        row[ids] -= config.presence_penalty * (n > 0) + config.frequency_penalty * n
    for token, bias in config.logit_bias:
        if token >= width:
            raise ConfigError(
                f"SamplingConfig.logit_bias names token {token}; the vocabulary has {width} ids"
            )
        row[token] += bias
    return row


class TokenSampler:
    """One sequence's draws under ``config``: its generator (``sequence_rng(seed,
    index)``), the tokens the repetition penalty sees, the counts of generated tokens
    the presence and frequency penalties see, and an optional ``constraint``.

    ``observe`` the prompt; calling the sampler on a row of logits returns the next
    token (and, when ``config.logprobs`` is set, leaves its `TokenLogprobs` in
    ``last``); ``accept`` each drawn token the sequence keeps (a stop id that ends it
    is not kept). ``observe`` of a generated token feeds the repetition penalty
    only."""

    def __init__(
        self, config: SamplingConfig, index: int = 0, constraint: Constraint | None = None
    ) -> None:
        self.config = config
        self.rng = sequence_rng(config.seed, index)
        self.seen: set[int] = set()
        self.counts: dict[int, int] = {}
        self.constraint = constraint
        self.last: TokenLogprobs | None = None

    def observe(self, tokens: Iterable[int]) -> None:
        """Tokens now in the sequence (kept only while a repetition penalty is on)."""
        if self.config.repetition_penalty != 1.0:
            self.seen.update(int(t) for t in tokens)

    def accept(self, token: int) -> None:
        """A drawn token the sequence keeps: the penalties see it, the constraint
        advances past it."""
        token = int(token)
        self.observe((token,))
        if self.config.counts_tokens:
            self.counts[token] = self.counts.get(token, 0) + 1
        if self.constraint is not None:
            self.constraint.advance(token)

    def draw(self, logits: Any) -> int | None:
        """The next token, or None when the constraint allows none (its document is
        complete and the end of sequence was kept or is not a stop id): the sequence
        ends there."""
        config = self.config
        mask = None
        if self.constraint is not None:
            width = _row(logits, config.vocab_limit).shape[0]
            mask = constraint_mask(self.constraint.allowed(), width)
            if not mask.any():
                return None
        token = sample_next(logits, config, self.rng, self.seen, self.counts, mask)
        if config.logprobs is not None:
            self.last = token_logprobs(logits, token, config.logprobs, config.vocab_limit)
        return token

    def __call__(self, logits: Any) -> int:
        token = self.draw(logits)
        if token is None:
            raise ConfigError("TokenSampler: the constraint allows no token")
        return token


def replay_tokens(context_length: int) -> int:
    """How many of a sequence's newest tokens are kept when its window slides: half
    the context (at least 1, at most ``context_length - 1``)."""
    return max(1, min(context_length // 2, context_length - 1))


def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    config: SamplingConfig,
    constraints: Sequence[Constraint | None] | None = None,
    grammar: Any = None,
) -> list[GenerationResult]:
    """Continue each prompt (a non-empty list of token ids) with ``model``, batching all
    sequences in one forward per step, each a `riftco.nn.DecodeSession` over a paged
    key/value cache (the contiguous cache on a backend without ``paged_attention``):
    one prefill of the ragged prompts, then one token per unfinished sequence per step.

    Sequence j draws with ``sequence_rng(config.seed, j)``, so its tokens are the same
    alone or batched at the same index. ``constraints`` (one per prompt, or None)
    mask what each sequence may draw next (`Constraint`); a stop id ends a
    constrained sequence only where its mask allows it, and a constraint that allows
    nothing (a complete document) ends its sequence with ``stop``. ``grammar`` (instead) is any
    object whose ``start()`` returns a fresh `Constraint` (riftco-text's
    ``TokenGrammar``): every prompt gets its own state.

    A sequence that fills the context slides its window as the server does (and as a
    `DecodeSession` does): its cache is dropped and its newest
    ``replay_tokens(context_length)`` tokens (half the context) are replayed from
    position 0, so generation runs on to ``max_new_tokens`` or a stop id.

    The logits stay on the device until a draw needs them: on a backend with
    ``decode_device_sampling`` a greedy draw reads back only the argmax ids
    (`riftco.nn.session`), the same tokens."""
    prompts = [list(map(int, p)) for p in prompts]
    c = model.config
    for j, p in enumerate(prompts):
        if not p:
            raise ConfigError(f"generate: prompt {j} is empty")
        if min(p) < 0 or max(p) >= c.vocab_size:
            raise ConfigError(f"generate: prompt {j} has a token outside 0..{c.vocab_size - 1}")
        c.check_length(len(p))
    if grammar is not None:
        if constraints is not None:
            raise ConfigError("generate: give constraints or grammar, not both")
        if not callable(getattr(grammar, "start", None)):
            raise ConfigError(
                f"generate: grammar must have start() returning a constraint, found "
                f"{type(grammar).__name__}"
            )
        constraints = [grammar.start() for _ in prompts]
    if constraints is not None and len(constraints) != len(prompts):
        raise ConfigError(
            f"generate: expected one constraint (or None) per prompt ({len(prompts)}), "
            f"found {len(constraints)}"
        )
    if not prompts:
        return []
    wanted = config.logprobs is not None
    out: list[list[int]] = [[] for _ in prompts]
    probs: list[list[TokenLogprobs]] = [[] for _ in prompts]
    reasons: list[str | None] = [None] * len(prompts)
    if config.max_new_tokens == 0:
        return [GenerationResult([], "length", [] if wanted else None) for _ in prompts]
    from riftco.nn.session import prefill_many, step_many

    sessions = _sessions(model, prompts, config.max_new_tokens)
    try:
        prefill_many(sessions, prompts, logits=False)  # read when a draw needs them
        active = list(range(len(prompts)))
        stops = set(config.stop_ids)
        while active:
            still, feed = [], []
            for j in active:
                session = sessions[j]
                constraint = None if constraints is None else constraints[j]
                token = session.sample(config, index=j, constraint=constraint)
                if token is None or token in stops:
                    reasons[j] = "stop"
                    continue
                out[j].append(token)
                last = session.last_logprobs
                if wanted and last is not None:
                    probs[j].append(last)
                if len(out[j]) >= config.max_new_tokens:
                    reasons[j] = "length"
                    sampler = session.sampler
                    if sampler is not None:  # kept, though never fed
                        sampler.accept(token)
                    continue
                still.append(j)
                feed.append(token)
            active = still
            if active:
                step_many([sessions[j] for j in active], feed, logits=False)
    finally:
        for session in sessions:
            session.close()
    return [
        GenerationResult(tokens, reason or "length", p if wanted else None)
        for tokens, reason, p in zip(out, reasons, probs)
    ]


#: The page size of the paged cache `generate` decodes over.
GENERATE_PAGE_SIZE = 16


def _sessions(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[Any]:
    """One session per prompt: over a paged cache holding just the pages each sequence
    can reach, each leased at once (consecutive pages: the attention kernels then sum
    in the order of a contiguous cache); over the contiguous cache on a backend without
    the ``paged_attention`` kernel."""
    from riftco.nn.session import DecodeSession, DecodeSessionPool

    c = model.config
    if "paged_attention" not in model.backend.capabilities():
        cache = ContiguousKVCache(c, max_sequences=len(prompts), backend=model.backend)
        return [DecodeSession(model, cache) for _ in prompts]
    reach = [min(c.context_length, len(p) + max_new_tokens) for p in prompts]
    size = GENERATE_PAGE_SIZE
    pool = DecodeSessionPool(model, pages=sum(-(-r // size) for r in reach), page_size=size)
    return [pool.session(reserve_tokens=r, lease=True) for r in reach]


__all__ = [
    "GENERATE_PAGE_SIZE",
    "LOGIT_BIAS_RANGE",
    "MAX_TOP_LOGPROBS",
    "PENALTY_RANGE",
    "Constraint",
    "GenerationResult",
    "SamplingConfig",
    "TokenLogprobs",
    "TokenSampler",
    "choice_seed",
    "constraint_mask",
    "generate",
    "log_softmax",
    "replay_tokens",
    "sample_next",
    "sequence_rng",
    "token_logprobs",
]
