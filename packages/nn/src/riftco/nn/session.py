"""Decode sessions: one sequence being decoded by a model over a key/value cache.

A `DecodeSession` holds one sequence's tokens, its place in the cache and its
sampler. ``prefill(tokens)`` and ``step(token)`` return the logits of the last
position; ``sample(config)`` draws the next token with the one sampler
(`riftco.nn.TokenSampler`: the draws of `riftco.nn.generate`); ``rollback(n)`` drops
the last n tokens; ``close()`` gives the cache room back. Several sessions over one
cache step together in one forward (`step_many`, `prefill_many`, or a
`DecodeSessionPool`'s ``step``), which runs the whole-step native decoder where the
backend has one and op by op otherwise (``DecoderOnlyTransformer.forward_incremental``).

Where the backend declares ``decode_device_sampling`` (the cuda backend) and a
draw needs nothing of the logits but their largest entry (greedy, with no logprobs,
penalties, bias, vocabulary limit or constraint), the logits of a step fed with
``logits=False`` (`step_many`, `prefill_many`; `riftco.nn.generate` feeds so) stay on
the device and ``sample`` reads back only the argmax ids of the batch (8 bytes a row),
the same tokens as the host sampler's. Every other draw reads the logits and samples on
the host (the one sampler).

The cache is a `riftco.nn.PagedKVCache` (a `DecodeSessionPool` owns one) or the
contiguous reference cache. A session whose cached window is full slides as
`generate` does: the window is dropped and the newest ``replay_tokens(context)``
tokens are prefilled again from position 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from riftco.nn.cache import ContiguousKVCache
from riftco.nn.errors import SessionError
from riftco.nn.generation import Constraint, SamplingConfig, TokenLogprobs, TokenSampler
from riftco.nn.generation import replay_tokens as _replay_tokens
from riftco.nn.paged_cache import PagedKVCache

Cache = PagedKVCache | ContiguousKVCache


class _Rows:
    """The logits ``[n, vocab]`` of one forward, where they were computed: read to the
    host once (``host``) when a draw needs them, or only their argmax ids (``argmax``)."""

    def __init__(self, logits: Any) -> None:
        self.logits = logits
        self._host: np.ndarray | None = None
        self._ids: np.ndarray | None = None

    def host(self) -> np.ndarray:
        if self._host is None:
            self._host = np.asarray(self.logits.numpy())
        return self._host

    def argmax(self) -> np.ndarray:
        if self._ids is None:
            if self._host is not None:  # already read: the host's argmax, the same ids
                self._ids = np.argmax(self._host, axis=-1)
            else:  # one read of the ids (int64 a row)
                self._ids = np.asarray(self.logits.argmax(axis=-1).numpy()).reshape(-1)
        return self._ids


def device_greedy(config: SamplingConfig, constraint: Constraint | None, vocab: int) -> bool:
    """Whether a draw under ``config`` is the argmax of the raw logits alone (so the
    device can draw it): greedy, no logprobs, penalties, bias, constraint, and no
    vocabulary limit short of ``vocab``."""
    limit = config.vocab_limit
    return (
        config.temperature == 0.0
        and constraint is None
        and config.logprobs is None
        and config.repetition_penalty == 1.0
        and not config.counts_tokens
        and not config.logit_bias
        and (limit is None or limit >= vocab)
    )


class DecodeSession:
    """One sequence decoded by ``model`` over ``cache`` (a `PagedKVCache` or a
    `ContiguousKVCache`). ``reserve_tokens`` sets aside the pages that many tokens need
    when the session takes its place in a paged cache (at its first prefill or step);
    ``lease`` takes them at once, so the sequence's pages are consecutive (see
    `PagedKVCache.add_sequence`)."""

    def __init__(
        self,
        model: Any,
        cache: Cache,
        *,
        reserve_tokens: int = 0,
        lease: bool = False,
    ) -> None:
        if not isinstance(cache, (PagedKVCache, ContiguousKVCache)):
            raise SessionError(
                f"DecodeSession: expected a PagedKVCache or a ContiguousKVCache, found "
                f"{type(cache).__name__}"
            )
        config = getattr(model, "config", None)
        if config is None or not callable(getattr(model, "forward_incremental", None)):
            raise SessionError(
                f"DecodeSession: expected a model with forward_incremental and a config, "
                f"found {type(model).__name__}"
            )
        if isinstance(reserve_tokens, bool) or not 0 <= int(reserve_tokens) <= cache.capacity:
            raise SessionError(
                f"DecodeSession: reserve_tokens must be in 0..{cache.capacity}, found "
                f"{reserve_tokens!r}"
            )
        self.model = model
        self.cache = cache
        self._reserve, self._lease = int(reserve_tokens), bool(lease)
        self._pool: DecodeSessionPool | None = None
        self._seq: int | None = None
        self._tokens: list[int] = []
        self._stepped: list[bool] = []  # which tokens came by step (the sampler counts them)
        self._logits: np.ndarray | None = None
        self._rows: tuple[_Rows, int] | None = None  # the logits not read yet, and the row
        self._sampler: TokenSampler | None = None
        self._sampler_key: tuple[Any, ...] | None = None
        self._closed = False

    # -- state --------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """Every token fed so far, in order (a slid window keeps them all here)."""
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def cached_tokens(self) -> int:
        """Tokens whose keys are in the cache now (the window; 0 before the first feed)."""
        return 0 if self._seq is None else self.cache.length(self._seq)

    @property
    def logits(self) -> np.ndarray | None:
        """The logits of the last position (None before a feed and after a rollback);
        logits kept on the device are read here."""
        if self._logits is None and self._rows is not None:
            rows, j = self._rows
            self._logits = rows.host()[j]
        return self._logits

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sampler(self) -> TokenSampler | None:
        """The sampler ``sample`` draws with (None before the first ``sample``)."""
        return self._sampler

    @property
    def last_logprobs(self) -> TokenLogprobs | None:
        """The last draw's log-probabilities when its config asked for them."""
        return None if self._sampler is None else self._sampler.last

    # -- feeding ------------------------------------------------------------------
    def prefill(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` (one or more) in one forward; the logits of the last one."""
        return _read(prefill_many([self], [tokens]))[0]

    def step(self, token: int) -> np.ndarray:
        """Append one token (a drawn one, or any the caller keeps); its logits."""
        return _read(step_many([self], [token]))[0]

    # -- sampling -----------------------------------------------------------------
    def sample(
        self, config: SamplingConfig, *, index: int = 0, constraint: Constraint | None = None
    ) -> int | None:
        """The next token drawn from the last logits by ``TokenSampler(config, index,
        constraint)`` (made at the first call, and again when any of the three change:
        then it starts from a fresh generator and sees the session's tokens). Returns
        None where the constraint allows no token. The draw is not fed: ``step`` it to
        keep it (the sampler then counts it), or stop."""
        self._check_open("sample")
        if not isinstance(config, SamplingConfig):
            raise SessionError(f"sample: expected a SamplingConfig, found {type(config).__name__}")
        if self._logits is None and self._rows is None:
            raise SessionError("sample: no logits to draw from; prefill or step first")
        key = (config, int(index), id(constraint))
        if self._sampler is None or self._sampler_key != key:
            sampler = TokenSampler(config, int(index), constraint)
            sampler.observe(self._tokens)
            if config.counts_tokens:
                sampler.counts = dict(Counter(t for t, s in zip(self._tokens, self._stepped) if s))
            self._sampler, self._sampler_key = sampler, key
        if self._logits is None and self._rows is not None:
            vocab = self.model.config.vocab_size
            if getattr(self.model.backend, "decode_device_sampling", False) and device_greedy(
                config, constraint, vocab
            ):
                rows, j = self._rows
                return int(rows.argmax()[j])
        logits = self.logits
        assert logits is not None
        return self._sampler.draw(logits)

    # -- rollback and close -------------------------------------------------------
    def rollback(self, n: int) -> None:
        """Drop the last ``n`` tokens. The cache keeps the rest (pages wholly past the
        new end go back to a paged cache); if the whole cached window is dropped, the
        next feed prefills the kept tokens again (the newest ``replay_tokens`` of them
        when they exceed the context). The sampler's penalties forget the dropped
        tokens; its generator is not rewound, and a constrained session cannot roll
        back (a constraint only moves forward). ``logits`` is None until the next feed."""
        self._check_open("rollback")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise SessionError(f"rollback: expected a non-negative int, found {n!r}")
        n = int(n)
        if n > len(self._tokens):
            raise SessionError(
                f"rollback: the session holds {len(self._tokens)} tokens; cannot drop {n}"
            )
        sampler = self._sampler
        if n and sampler is not None and sampler.constraint is not None:
            raise SessionError("rollback: a constrained session cannot roll back")
        if n == 0:
            return
        keep = len(self._tokens) - n
        if self._seq is not None:
            cached = self.cache.length(self._seq)
            start = len(self._tokens) - cached
            if keep > start:
                self.cache.truncate(self._seq, keep - start)
            else:
                self._drop()
        del self._tokens[keep:]
        del self._stepped[keep:]
        self._logits = None
        self._rows = None
        if sampler is not None:
            if sampler.config.repetition_penalty != 1.0:
                sampler.seen = set(self._tokens)
            if sampler.config.counts_tokens:
                sampler.counts = dict(Counter(t for t, s in zip(self._tokens, self._stepped) if s))

    def close(self) -> None:
        """Free the session's place in the cache (closing twice is harmless)."""
        if self._closed:
            return
        self._drop()
        self._closed = True
        self._logits = None
        self._rows = None
        if self._pool is not None:
            self._pool._forget(self)

    def _drop(self) -> None:
        if self._seq is not None:
            self.cache.remove(self._seq)
            self._seq = None

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise SessionError(f"{op}: the session is closed")

    # -- one session's part of a batched forward ----------------------------------
    def _plan(self, new: list[int]) -> tuple[int, list[int], bool]:
        """This session's sequence id and the tokens to feed it for ``new``; whether a
        new sequence was started (the window slid, or the first feed)."""
        cache = self.cache
        if self._seq is not None and cache.length(self._seq) + len(new) <= cache.capacity:
            return self._seq, new, False
        self._drop()  # slide: the window is full
        total = [*self._tokens, *new]
        if len(total) > cache.capacity:
            total = total[-max(_replay_tokens(cache.capacity), len(new)) :]
        if isinstance(cache, PagedKVCache):
            shared = total if cache.share_prefixes else None
            seq = cache.add_sequence(reserve_tokens=self._reserve, prompt=shared, lease=self._lease)
        else:
            seq = cache.add_sequence()
        self._seq = seq
        return seq, total[cache.length(seq) :], True


def _read(rows: np.ndarray | None) -> np.ndarray:
    assert rows is not None  # read=True returns the host rows
    return rows


def _tokens_of(session: DecodeSession, tokens: Any, op: str) -> list[int]:
    vocab = session.model.config.vocab_size
    try:
        ids = np.asarray(tokens)
    except (TypeError, ValueError):
        ids = np.asarray([], dtype=object)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise SessionError(f"{op}: expected a non-empty list of token ids, found {tokens!r}")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        bad = low if low < 0 else high
        raise SessionError(f"{op}: token {bad} is outside the vocabulary 0..{vocab - 1}")
    return [int(t) for t in ids]


def _check_batch(sessions: Sequence[DecodeSession], count: int, op: str) -> None:
    if not sessions:
        raise SessionError(f"{op}: expected at least one session, found none")
    if count != len(sessions):
        raise SessionError(f"{op}: {len(sessions)} sessions with {count} token inputs")
    first = sessions[0]
    for s in sessions:
        if not isinstance(s, DecodeSession):
            raise SessionError(f"{op}: expected DecodeSessions, found {type(s).__name__}")
        s._check_open(op)
        if s.cache is not first.cache or s.model is not first.model:
            raise SessionError(
                f"{op}: every session must share one model and one cache; a session of "
                f"another cache or model was given"
            )
        if s._pool is not first._pool:
            raise SessionError(f"{op}: the sessions belong to different pools")
    if len({id(s) for s in sessions}) != len(sessions):
        raise SessionError(f"{op}: a session appears twice")


def _forward(
    sessions: Sequence[DecodeSession], news: list[list[int]], read: bool = True
) -> np.ndarray | None:
    """Feed ``news[j]`` to session j, all in one forward; the logits ``[n, vocab]``
    (``read=False``: None, the logits left where they were computed until a draw)."""
    first = sessions[0]
    cache, model = first.cache, first.model
    for new in news:
        if len(new) > cache.capacity:
            raise SessionError(
                f"prefill: {len(new)} tokens do not fit the context of {cache.capacity}"
            )
    plans = []
    try:
        for s, new in zip(sessions, news):
            plans.append(s._plan(new))
        logits = model.forward_incremental([p[1] for p in plans], cache, [p[0] for p in plans])
        rows = _Rows(logits)
        if read:
            rows.host()
    except BaseException:
        cache.rollback()
        for s, plan in zip(sessions, plans):
            if plan[2]:  # a sequence begun for this forward holds nothing yet
                s._drop()
        raise
    for j, (s, new) in enumerate(zip(sessions, news)):
        s._tokens.extend(new)
        s._logits = None
        s._rows = (rows, j)
    return rows.host() if read else None


def prefill_many(
    sessions: Sequence[DecodeSession],
    prompts: Sequence[Sequence[int]],
    *,
    logits: bool = True,
) -> np.ndarray | None:
    """Append ``prompts[j]`` to ``sessions[j]`` for every j in one forward; the logits
    of each session's last new token ``[n, vocab]`` (``logits=False``: None, and the
    logits are read only when a draw needs them; see the module docstring)."""
    _check_batch(sessions, len(prompts), "prefill")
    news = [_tokens_of(s, p, "prefill") for s, p in zip(sessions, prompts)]
    rows = _forward(sessions, news, logits)
    for s, new in zip(sessions, news):
        s._stepped.extend([False] * len(new))
        if s._sampler is not None:
            s._sampler.observe(new)
    return rows


def step_many(
    sessions: Sequence[DecodeSession], tokens: Sequence[int], *, logits: bool = True
) -> np.ndarray | None:
    """Append ``tokens[j]`` to ``sessions[j]`` for every j in one forward (the whole-step
    native decoder where the backend has one); the logits ``[n, vocab]`` (``logits=False``:
    None, and the logits are read only when a draw needs them). Each token is accepted
    by its session's sampler (its penalties and constraint move on)."""
    _check_batch(sessions, len(tokens), "step")
    news = [_tokens_of(s, [t], "step") for s, t in zip(sessions, tokens)]
    rows = _forward(sessions, news, logits)
    for s, new in zip(sessions, news):
        s._stepped.append(True)
        if s._sampler is not None:
            s._sampler.accept(new[0])
    return rows


class DecodeSessionPool:
    """Sessions of ``model`` over a `PagedKVCache` of ``pages`` pages of ``page_size``
    positions that the pool owns (``share_prefixes``: sessions share identical full
    prompt pages). ``session()`` opens one; ``prefill`` and ``step`` run several of
    this pool's sessions in one forward; ``close()`` closes them all."""

    def __init__(
        self,
        model: Any,
        pages: int,
        page_size: int = 16,
        *,
        share_prefixes: bool = False,
    ) -> None:
        self.model = model
        self.cache = PagedKVCache(
            model.config,
            pages,
            page_size,
            backend=model.backend,
            share_prefixes=share_prefixes,
        )
        self._open: dict[int, DecodeSession] = {}

    def session(self, *, reserve_tokens: int = 0, lease: bool = False) -> DecodeSession:
        """A new empty session over this pool's cache (see `DecodeSession`)."""
        session = DecodeSession(self.model, self.cache, reserve_tokens=reserve_tokens, lease=lease)
        session._pool = self
        self._open[id(session)] = session
        return session

    @property
    def sessions(self) -> list[DecodeSession]:
        """The open sessions, oldest first."""
        return list(self._open.values())

    def _own(self, sessions: Sequence[DecodeSession], op: str) -> None:
        for s in sessions:
            if not isinstance(s, DecodeSession) or s._pool is not self:
                raise SessionError(f"{op}: expected sessions of this pool, found one of another")

    def prefill(
        self, sessions: Sequence[DecodeSession], prompts: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """`prefill_many` over sessions of this pool."""
        self._own(sessions, "prefill")
        return _read(prefill_many(sessions, prompts))

    def step(self, sessions: Sequence[DecodeSession], tokens: Sequence[int]) -> np.ndarray:
        """`step_many` over sessions of this pool."""
        self._own(sessions, "step")
        return _read(step_many(sessions, tokens))

    def close(self) -> None:
        """Close every open session: every page goes back to the pool."""
        for session in self.sessions:
            session.close()

    def _forget(self, session: DecodeSession) -> None:
        self._open.pop(id(session), None)

    @property
    def pages_in_use(self) -> int:
        return self.cache.pages_in_use


__all__ = ["DecodeSession", "DecodeSessionPool", "prefill_many", "step_many"]
