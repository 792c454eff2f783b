"""`PagedKVCache`: the key/value cache protocol (`riftco.nn.cache`) over paged pools.

Per layer, one key and one value pool ``[pages * page_size, kv_heads, head_dim]``
(viewed as ``[pages, page_size, kv_heads, head_dim]`` by the ``paged_attention``
capability). Each sequence has a logical page table: position ``p`` lives in row
``p % page_size`` of its page ``p // page_size``. Pages are leased as sequences
grow and returned when they are removed or truncated; identical full prompt pages are
shared between sequences (see `riftco.nn.page_allocator`).

A step is transactional: ``begin`` leases the pages it needs (or raises
`PoolExhausted` having changed nothing), ``append`` writes only past each
sequence's committed length, and until ``commit`` a ``rollback`` (or the next
``begin``) returns the new pages, so a failed forward leaves the cache as it was.

This is the cache of in-process decoding (`riftco.nn.DecodeSession`) and of serving
(riftco-serve's ``PagedKVCachePool`` is this class, raising the server's error type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

import riftco.tensor as rt
from riftco.nn.cache import DecodeLayout, DecodeStep
from riftco.nn.config import TransformerConfig
from riftco.nn.errors import CacheError, PoolExhausted
from riftco.nn.page_allocator import PageAllocator, PrefixKey, prefix_keys
from riftco.tensor import Backend, Tensor
from riftco.tensor.ops.paged import paged_attention_unchecked


@dataclass
class _Sequence:
    pages: list[int] = field(default_factory=list)
    length: int = 0
    reserved: int = 0  # pages set aside for this sequence, not yet leased
    prompt_keys: list[PrefixKey] = field(default_factory=list)
    shared_tokens: int = 0


@dataclass
class _Staged:
    step: DecodeStep
    lengths: list[int]
    row_array: np.ndarray  # pool row of every new token
    table_array: np.ndarray  # [S, max_pages] page tables of the step's sequences
    leased: list[tuple[int, int, bool]]  # (seq_id, page, taken from its reservation)
    backend: Backend | str | None
    _rows: Tensor | None = None
    _table: Tensor | None = None

    # The rows and table as tensors are uploaded when the op-by-op forward first asks
    # (whole-step decoding reads the arrays: its backend uploads them with the rest).
    @property
    def rows(self) -> Tensor:
        if self._rows is None:
            self._rows = rt.from_numpy(self.row_array, backend=self.backend)
        return self._rows

    @property
    def table(self) -> Tensor:
        if self._table is None:
            self._table = rt.from_numpy(self.table_array, backend=self.backend)
        return self._table


class PagedKVCache:
    """A paged key/value cache for ``config``'s layers, with ``pages`` pages of
    ``page_size`` token positions each; implements ``riftco.nn.WholeStepCache``.
    ``allocator_type`` is the `PageAllocator` class it keeps its pages with."""

    allocator_type: ClassVar[type[PageAllocator]] = PageAllocator

    def __init__(
        self,
        config: TransformerConfig,
        pages: int,
        page_size: int = 16,
        *,
        backend: str | Backend | None = None,
        share_prefixes: bool = True,
    ) -> None:
        if page_size <= 0:
            raise CacheError(f"PagedKVCache: page_size must be positive, found {page_size}")
        self.config = config
        self.page_size = int(page_size)
        self.share_prefixes = share_prefixes
        self.allocator = self.allocator_type(int(pages))
        rows = self.allocator.pages * self.page_size
        shape = (rows, config.n_kv_heads, config.head_dim)
        self.keys = [rt.zeros(shape, backend=backend) for _ in range(config.n_layers)]
        self.values = [rt.zeros(shape, backend=backend) for _ in range(config.n_layers)]
        self._backend = rt.get_backend(backend) if not self.keys else self.keys[0].backend
        paged = (self.allocator.pages, self.page_size, *shape[1:])
        # Views of the same storage (reshape never copies), for paged_attention.
        self._paged_keys = [k.reshape(paged) for k in self.keys]
        self._paged_values = [v.reshape(paged) for v in self.values]
        self._seqs: dict[int, _Sequence] = {}
        self._next_id = 0
        self._staged: _Staged | None = None

    # -- sizes ------------------------------------------------------------------
    @property
    def pages(self) -> int:
        return self.allocator.pages

    @property
    def pages_in_use(self) -> int:
        return self.allocator.in_use

    @property
    def pages_available(self) -> int:
        """Pages that new reservations may still take."""
        return self.allocator.available

    def pages_for(self, tokens: int) -> int:
        return -(-int(tokens) // self.page_size)

    @property
    def capacity(self) -> int:
        """The most tokens one sequence may hold (the model's context length)."""
        return self.config.context_length

    # -- sequences --------------------------------------------------------------
    def add_sequence(
        self,
        seq_id: int | None = None,
        *,
        reserve_tokens: int = 0,
        prompt: Sequence[int] | None = None,
        lease: bool = False,
    ) -> int:
        """Start a sequence and return its id.

        ``reserve_tokens`` sets aside the pages that many tokens need, so the
        sequence can grow that far without meeting an exhausted pool; if they are
        not available, `PoolExhausted` is raised and nothing changes. ``lease`` takes
        those pages at once instead of as the sequence grows, so they are consecutive
        wherever the pool's free pages are (the attention kernels then read the
        sequence in the same tiles as a contiguous cache, for the same sums). With a
        ``prompt``, full prompt pages already in the pool are shared: the sequence
        starts with ``length(seq_id)`` tokens cached (always fewer than the prompt's).
        """
        if seq_id is None:
            while self._next_id in self._seqs:
                self._next_id += 1
            seq_id = self._next_id
        if seq_id in self._seqs:
            raise CacheError(f"PagedKVCache: sequence {seq_id} already exists")
        if reserve_tokens > self.capacity:
            raise CacheError(
                f"PagedKVCache: cannot reserve {reserve_tokens} tokens for one sequence; "
                f"the context holds {self.capacity}"
            )
        seq = _Sequence()
        if prompt is not None:
            seq.prompt_keys = prefix_keys(prompt, self.page_size)
            if self.share_prefixes:
                usable = (len(prompt) - 1) // self.page_size  # leave a token to compute
                for key in seq.prompt_keys[:usable]:
                    page = self.allocator.share(key)
                    if page is None:
                        break
                    seq.pages.append(page)
        seq.length = seq.shared_tokens = len(seq.pages) * self.page_size
        needed = max(self.pages_for(reserve_tokens) - len(seq.pages), 0)
        try:
            self.allocator.reserve(needed)
        except PoolExhausted:
            self._release(seq.pages)
            raise
        seq.reserved = needed
        if lease:
            for _ in range(needed):
                seq.pages.append(self.allocator.lease(reserved=True))
            seq.reserved = 0
        self._seqs[seq_id] = seq
        return seq_id

    def remove(self, seq_id: int) -> None:
        """Forget a sequence: its pages and its unused reservation go back to the pool."""
        if self._staged is not None and seq_id in self._staged.step.seq_ids:
            self.rollback()
        seq = self._get(seq_id)
        self._release(seq.pages)
        self.allocator.unreserve(seq.reserved)
        del self._seqs[seq_id]

    def truncate(self, seq_id: int, length: int) -> None:
        """Keep the first ``length`` tokens of ``seq_id`` (a rollback of committed
        tokens): pages wholly past the new end go back to the pool. A kept partial page
        that is shared with another sequence, or indexed for sharing, is never written
        again: the sequence takes a private copy of it (or, when nobody else holds it,
        takes it out of the prefix index) before it grows into it again."""
        if self._staged is not None:
            self.rollback()
        seq = self._get(seq_id)
        length = int(length)
        if not 0 <= length <= seq.length:
            raise CacheError(
                f"truncate: sequence {seq_id} holds {seq.length} tokens; cannot keep {length}"
            )
        if length == seq.length:
            return
        keep, whole = self.pages_for(length), length // self.page_size
        tail = seq.pages[keep:]
        partial = keep > whole  # the last kept page will be written again
        if partial and self.allocator.refs(seq.pages[keep - 1]) > 1:
            freed = sum(self.allocator.refs(p) == 1 for p in tail)
            if seq.reserved == 0 and self.allocator.available + freed < 1:
                raise self.allocator.exhausted(
                    f"truncate: sequence {seq_id} needs a page for a private copy of a "
                    f"shared page, and the key/value pool has none"
                )
        self._release(tail)
        del seq.pages[keep:]
        del seq.prompt_keys[whole:]  # later tokens may differ from the prompt's
        seq.shared_tokens = min(seq.shared_tokens, whole * self.page_size)
        seq.length = length
        if partial:
            self._own(seq, keep - 1, length - whole * self.page_size)

    def _own(self, seq: _Sequence, index: int, rows: int) -> None:
        """Make page ``seq.pages[index]`` writable by ``seq`` alone; its first ``rows``
        rows are kept."""
        page = seq.pages[index]
        if self.allocator.refs(page) == 1:
            self.allocator.unpublish(page)
            return
        copy = self.allocator.lease(reserved=seq.reserved > 0)
        seq.reserved -= seq.reserved > 0
        b, ps = self._backend, self.page_size
        src = rt.from_numpy(np.arange(page * ps, page * ps + rows, dtype=np.int64), backend=b)
        dst = rt.from_numpy(np.arange(copy * ps, copy * ps + rows, dtype=np.int64), backend=b)
        for pools in (self.keys, self.values):
            for pool in pools:
                rt.write_rows_(pool, dst, rt.index_select(pool, 0, src))
        self.allocator.release(page)
        seq.pages[index] = copy

    def _release(self, pages: Sequence[int]) -> None:
        # Last page first: the free list then gives them back lowest position first.
        for page in reversed(pages):
            self.allocator.release(page)

    def sequences(self) -> list[int]:
        return list(self._seqs)

    def length(self, seq_id: int) -> int:
        return self._get(seq_id).length

    def page_table(self, seq_id: int) -> list[int]:
        """The pages of ``seq_id`` in position order."""
        return list(self._get(seq_id).pages)

    def _get(self, seq_id: int) -> _Sequence:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise CacheError(f"PagedKVCache: no sequence {seq_id}")
        return seq

    # -- the KVCache protocol -------------------------------------------
    def begin(self, seq_ids: Sequence[int], counts: Sequence[int]) -> DecodeStep:
        if self._staged is not None:
            self.rollback()
        seq_ids, counts = tuple(int(s) for s in seq_ids), tuple(int(n) for n in counts)
        if len(seq_ids) != len(counts) or not seq_ids or len(set(seq_ids)) != len(seq_ids):
            raise CacheError(f"begin: sequences {list(seq_ids)} with token counts {list(counts)}")
        seqs = [self._get(s) for s in seq_ids]
        for s, seq, n in zip(seq_ids, seqs, counts):
            if n <= 0 or seq.length + n > self.capacity:
                raise CacheError(
                    f"begin: sequence {s} holds {seq.length} tokens and cannot take {n} more "
                    f"(capacity {self.capacity})"
                )
        leased: list[tuple[int, int, bool]] = []
        try:
            for s, seq, n in zip(seq_ids, seqs, counts):
                while len(seq.pages) * self.page_size < seq.length + n:
                    from_reservation = seq.reserved > 0
                    page = self.allocator.lease(reserved=from_reservation)
                    seq.reserved -= from_reservation
                    seq.pages.append(page)
                    leased.append((s, page, from_reservation))
        except PoolExhausted:
            self._return(leased)
            raise
        step = DecodeStep(seq_ids, counts, tuple(seq.length for seq in seqs))
        self._staged = _Staged(step, *self._step_arrays(seqs, counts), leased, self._backend)
        return step

    def _step_arrays(
        self, seqs: list[_Sequence], counts: tuple[int, ...]
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        ps = self.page_size
        rows = []
        for seq, n in zip(seqs, counts):
            positions = np.arange(seq.length, seq.length + n)
            pages = np.asarray(seq.pages, dtype=np.int64)
            rows.append(pages[positions // ps] * ps + positions % ps)
        width = max(len(seq.pages) for seq in seqs)
        table = np.zeros((len(seqs), width), dtype=np.int64)
        for j, seq in enumerate(seqs):
            table[j, : len(seq.pages)] = seq.pages
        lengths = [seq.length + n for seq, n in zip(seqs, counts)]
        return lengths, np.concatenate(rows), table

    def _current(self, step: DecodeStep) -> _Staged:
        staged = self._staged
        if staged is None or staged.step is not step:
            raise CacheError("PagedKVCache: this step was not begun (or already ended)")
        return staged

    def _check_rows(self, op: str, step: DecodeStep, x: Tensor, heads: int | None) -> None:
        # The pools, rows and table are built here; only the model's tensors need checks
        # (once per call, cheaply: decoding calls this for every layer of every step).
        if not isinstance(x, Tensor) or x.dtype is not rt.float32 or x.backend != self._backend:
            raise CacheError(f"{op}: expected a float32 Tensor on {self._backend.name}")
        shape = x.shape
        if (
            len(shape) != 3
            or shape[0] != step.rows
            or shape[2] != self.config.head_dim
            or (shape[1] != heads if heads is not None else shape[1] % self.config.n_kv_heads)
        ):
            raise CacheError(f"{op}: {shape} does not fit {step.rows} rows of this cache")

    def append(self, step: DecodeStep, layer: int, keys: Tensor, values: Tensor) -> None:
        staged = self._current(step)
        heads = self.config.n_kv_heads
        self._check_rows("append", step, keys, heads)
        self._check_rows("append", step, values, heads)
        # The rows and pools are this cache's own and the model tensors were checked
        # just above, so the op's own checks are skipped in this per-layer loop.
        for pool, new in ((self.keys[layer], keys), (self.values[layer], values)):
            rt.write_rows_(pool, staged.rows, new, check=False)

    def attend(
        self, step: DecodeStep, layer: int, queries: Tensor, *, scale: float, window: int
    ) -> Tensor:
        staged = self._current(step)
        self._check_rows("attend", step, queries, None)
        return paged_attention_unchecked(
            queries,
            self._paged_keys[layer],
            self._paged_values[layer],
            staged.table,
            step.row_starts,
            step.counts,
            staged.lengths,
            scale=scale,
            window=window,
        )

    def decode_layout(self, step: DecodeStep) -> DecodeLayout:
        """The begun ``step``'s layout, for whole-step decoding (riftco.nn's
        ``DecodeLayout``): the pools as rows, the page table and the page size."""
        staged = self._current(step)
        return DecodeLayout(
            staged.row_array,
            self.keys,
            self.values,
            staged.lengths,
            page_table=staged.table_array,
            page_size=self.page_size,
        )

    def commit(self, step: DecodeStep) -> None:
        self._current(step)
        for s, n in zip(step.seq_ids, step.counts):
            seq = self._seqs[s]
            before = seq.length // self.page_size
            seq.length += n
            if self.share_prefixes:
                # Full prompt pages become shareable once written.
                full = min(seq.length // self.page_size, len(seq.prompt_keys))
                for i in range(before, full):
                    self.allocator.publish(seq.pages[i], seq.prompt_keys[i])
        self._staged = None

    def rollback(self) -> None:
        """Undo a step that was begun and not committed: its new pages go back."""
        staged, self._staged = self._staged, None
        if staged is not None:
            self._return(staged.leased)

    def _return(self, leased: list[tuple[int, int, bool]]) -> None:
        for s, page, from_reservation in reversed(leased):
            seq = self._seqs[s]
            seq.pages.remove(page)
            self.allocator.release(page)
            if from_reservation:
                self.allocator.reserve(1)
                seq.reserved += 1


__all__ = ["PagedKVCache"]
