"""Key/value caches for incremental decoding.

One incremental forward is a :class:`DecodeStep`: a batch of sequences, each with
its own number of new tokens (a whole prompt or one token), packed row after row.
The model drives a cache through the :class:`KVCache` protocol:

1. ``step = cache.begin(seq_ids, counts)`` reserves room and fixes each
   sequence's start position (its cached length);
2. for every layer, ``cache.append(step, layer, keys, values)`` stores the new
   keys and values (``[N, kv_heads, head_dim]``, packed like the tokens), then
   ``cache.attend(step, layer, queries, scale=..., window=...)`` returns each
   sequence's new queries attended over its own keys (``[N, heads, head_dim]``);
3. ``cache.commit(step)`` makes the new tokens part of each sequence.

A :class:`WholeStepCache` also gives a begun step's :class:`DecodeLayout`, so a backend's
whole-step decoder writes and reads the cache in one call instead of steps 2's ops.

A cache decides where keys live and which attention capability reads them, so a
paged cache (a page table per sequence over per-layer pools) implements the same
protocol without touching attention code. :class:`ContiguousKVCache` is the
reference: one fixed-capacity slot of rows per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, runtime_checkable

import numpy as np

import riftco.tensor as rt
from riftco.nn.config import TransformerConfig
from riftco.nn.errors import CacheError
from riftco.tensor import Backend, Tensor


@dataclass(frozen=True)
class DecodeStep:
    """Sequences ``seq_ids`` gain ``counts[j]`` tokens each, starting at position
    ``starts[j]``; their rows are packed in this order."""

    seq_ids: tuple[int, ...]
    counts: tuple[int, ...]
    starts: tuple[int, ...]

    @cached_property
    def row_starts(self) -> tuple[int, ...]:
        """The first packed row of each sequence."""
        return tuple(int(x) for x in np.cumsum((0, *self.counts[:-1])))

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @cached_property
    def positions(self) -> np.ndarray:
        """int64 position of every packed row."""
        parts = [np.arange(s, s + n, dtype=np.int64) for s, n in zip(self.starts, self.counts)]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    @cached_property
    def last_rows(self) -> tuple[int, ...]:
        """The packed row of each sequence's last new token."""
        return tuple(r + n - 1 for r, n in zip(self.row_starts, self.counts))


@dataclass(frozen=True)
class DecodeLayout:
    """Where a begun step's keys and values go and are read, for whole-step decoding
    (riftco.tensor's ``Decoder.step``): the cache row of every new token (int64
    ``rows``), every layer's ``keys`` and ``values`` ``[rows, kv_heads, head_dim]``, each
    sequence's length after the step, and either its first row (``starts``, contiguous)
    or a ``page_table`` (int64 ``[S, width]``) over pages of ``page_size`` rows."""

    rows: np.ndarray
    keys: list[Tensor]
    values: list[Tensor]
    lengths: list[int]
    starts: list[int] | None = None
    page_table: np.ndarray | None = None
    page_size: int = 0


@runtime_checkable
class KVCache(Protocol):
    """What a model needs from a key/value cache (see the module docstring)."""

    def length(self, seq_id: int) -> int:
        """Tokens cached for ``seq_id``."""
        ...

    def begin(self, seq_ids: Sequence[int], counts: Sequence[int]) -> DecodeStep: ...

    def append(self, step: DecodeStep, layer: int, keys: Tensor, values: Tensor) -> None: ...

    def attend(
        self, step: DecodeStep, layer: int, queries: Tensor, *, scale: float, window: int
    ) -> Tensor: ...

    def commit(self, step: DecodeStep) -> None: ...


@runtime_checkable
class WholeStepCache(KVCache, Protocol):
    """A `KVCache` that whole-step decoding can write and read directly: it says where a
    begun step's keys and values live (`DecodeLayout`). Both caches here and
    riftco-serve's paged cache are; a cache that is not decodes op by op."""

    def decode_layout(self, step: DecodeStep) -> DecodeLayout: ...


class ContiguousKVCache:
    """Per layer, one key and one value tensor ``[max_sequences * capacity, kv_heads,
    head_dim]``; sequence slot i owns rows ``i * capacity`` onward. Keys are written in
    place (``write_rows_``) and read by the ``attention_varlen`` capability."""

    def __init__(
        self,
        config: TransformerConfig,
        max_sequences: int,
        capacity: int | None = None,
        backend: str | Backend | None = None,
    ) -> None:
        if max_sequences <= 0:
            raise CacheError(
                f"ContiguousKVCache: max_sequences must be positive, found {max_sequences}"
            )
        self.capacity = config.context_length if capacity is None else int(capacity)
        if not 0 < self.capacity <= config.context_length:
            raise CacheError(
                f"ContiguousKVCache: capacity must be in 1..{config.context_length}, "
                f"found {capacity}"
            )
        self.max_sequences, self.layers = int(max_sequences), config.n_layers
        rows = self.max_sequences * self.capacity
        shape = (rows, config.n_kv_heads, config.head_dim)
        self.keys = [rt.zeros(shape, backend=backend) for _ in range(self.layers)]
        self.values = [rt.zeros(shape, backend=backend) for _ in range(self.layers)]
        self._backend = self.keys[0].backend if self.keys else rt.get_backend(backend)
        self._slots: dict[int, int] = {}
        self._step_rows = np.zeros(0, np.int64)
        self._lengths: dict[int, int] = {}
        self._free = list(range(self.max_sequences - 1, -1, -1))
        self._next_id = 0
        # (step, rows as a tensor once the op-by-op forward asks, bases, lengths)
        self._step: list | None = None

    # -- sequences ----------------------------------------------------------------
    def add_sequence(self, seq_id: int | None = None) -> int:
        """Start an empty sequence (under ``seq_id`` or a fresh id) and return its id."""
        if not self._free:
            raise CacheError(
                f"ContiguousKVCache: all {self.max_sequences} sequence slots are in use"
            )
        if seq_id is None:
            while self._next_id in self._slots:
                self._next_id += 1
            seq_id = self._next_id
        if seq_id in self._slots:
            raise CacheError(f"ContiguousKVCache: sequence {seq_id} already exists")
        self._slots[seq_id] = self._free.pop()
        self._lengths[seq_id] = 0
        return seq_id

    def remove(self, seq_id: int) -> None:
        """Forget a sequence and free its slot."""
        self._free.append(self._slots.pop(self._known(seq_id)))
        del self._lengths[seq_id]

    def sequences(self) -> list[int]:
        return list(self._slots)

    @property
    def free_slots(self) -> int:
        """How many more sequences fit."""
        return len(self._free)

    def rollback(self) -> None:
        """Forget a step that was begun and not committed (nothing was counted yet)."""
        self._step = None

    def length(self, seq_id: int) -> int:
        return self._lengths[self._known(seq_id)]

    def truncate(self, seq_id: int, length: int) -> None:
        """Keep the first ``length`` tokens of ``seq_id`` (the rows past it are
        written again as the sequence grows)."""
        self._step = None
        held = self.length(seq_id)
        if not 0 <= int(length) <= held:
            raise CacheError(
                f"truncate: sequence {seq_id} holds {held} tokens; cannot keep {length}"
            )
        self._lengths[seq_id] = int(length)

    def _known(self, seq_id: int) -> int:
        if seq_id not in self._slots:
            raise CacheError(f"ContiguousKVCache: no sequence {seq_id}")
        return seq_id

    # -- the protocol -------------------------------------------------------------
    def begin(self, seq_ids: Sequence[int], counts: Sequence[int]) -> DecodeStep:
        seq_ids, counts = tuple(map(int, seq_ids)), tuple(map(int, counts))
        if len(seq_ids) != len(counts) or not seq_ids:
            raise CacheError(f"begin: {len(seq_ids)} sequences with {len(counts)} token counts")
        if len(seq_ids) > 1 and len(set(seq_ids)) != len(seq_ids):
            raise CacheError(f"begin: a sequence appears twice in {list(seq_ids)}")
        starts = []
        for s, n in zip(seq_ids, counts):
            length = self.length(s)
            if n <= 0 or length + n > self.capacity:
                raise CacheError(
                    f"begin: sequence {s} holds {length} tokens and cannot take "
                    f"{n} more (capacity {self.capacity})"
                )
            starts.append(length)
        step = DecodeStep(seq_ids, counts, tuple(starts))
        bases = [self._slots[s] * self.capacity for s in seq_ids]
        ranges = [
            np.arange(b + st, b + st + n, dtype=np.int64) for b, st, n in zip(bases, starts, counts)
        ]
        rows = ranges[0] if len(ranges) == 1 else np.concatenate(ranges)
        lengths = [st + n for st, n in zip(starts, counts)]
        self._step = [step, None, bases, lengths]
        self._step_rows = rows
        return step

    def decode_layout(self, step: DecodeStep) -> DecodeLayout:
        """The begun ``step``'s layout, for whole-step decoding (see `DecodeLayout`)."""
        _, bases, lengths = self._current(step, upload=False)
        return DecodeLayout(self._step_rows, self.keys, self.values, lengths, starts=bases)

    def _current(
        self, step: DecodeStep, upload: bool = True
    ) -> tuple[Tensor, list[int], list[int]]:
        if self._step is None or self._step[0] is not step:
            raise CacheError("ContiguousKVCache: this step was not begun (or already committed)")
        if upload and self._step[1] is None:  # whole-step decoding reads the array only
            self._step[1] = rt.from_numpy(self._step_rows, backend=self._backend)
        return self._step[1], self._step[2], self._step[3]

    def append(self, step: DecodeStep, layer: int, keys: Tensor, values: Tensor) -> None:
        rows, _, _ = self._current(step)
        rt.write_rows_(self.keys[layer], rows, keys)
        rt.write_rows_(self.values[layer], rows, values)

    def attend(
        self, step: DecodeStep, layer: int, queries: Tensor, *, scale: float, window: int
    ) -> Tensor:
        _, bases, lengths = self._current(step)
        return rt.attention_varlen(
            queries,
            self.keys[layer],
            self.values[layer],
            step.row_starts,
            step.counts,
            bases,
            lengths,
            scale=scale,
            window=window,
        )

    def commit(self, step: DecodeStep) -> None:
        self._current(step, upload=False)
        for s, n in zip(step.seq_ids, step.counts):
            self._lengths[s] += n
        self._step = None


__all__ = ["ContiguousKVCache", "DecodeLayout", "DecodeStep", "KVCache", "WholeStepCache"]
