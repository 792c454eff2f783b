"""The key/value caches a server can use, behind riftco-nn's ``KVCache`` protocol
plus sequence management (``add_sequence``, ``remove``, ``length``, ``rollback``).

`PagedKVCachePool` is the serving cache; `ContiguousKVCachePool` (riftco-nn's
contiguous cache with the same sequence interface) is the reference strategy.
"""

from __future__ import annotations

from collections.abc import Sequence

from riftco.nn import ContiguousKVCache, TransformerConfig
from riftco.serve.errors import CacheError, PoolExhausted
from riftco.serve.paged_cache import PagedKVCachePool
from riftco.tensor import Backend


class ContiguousKVCachePool(ContiguousKVCache):
    """One slot of ``capacity`` rows per sequence (riftco-nn's reference cache), with
    the sequence interface of `PagedKVCachePool`; it never shares prompt pages."""

    def __init__(
        self,
        config: TransformerConfig,
        max_sequences: int,
        capacity: int | None = None,
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__(config, max_sequences, capacity, backend)

    def add_sequence(
        self,
        seq_id: int | None = None,
        *,
        reserve_tokens: int = 0,
        prompt: Sequence[int] | None = None,
    ) -> int:
        if reserve_tokens > self.capacity:
            raise CacheError(
                f"ContiguousKVCachePool: cannot reserve {reserve_tokens} tokens; a slot holds "
                f"{self.capacity}"
            )
        if not self.free_slots:
            raise PoolExhausted(f"all {self.max_sequences} sequence slots are in use")
        return super().add_sequence(seq_id)

    @property
    def pages(self) -> int:
        return self.max_sequences

    @property
    def pages_in_use(self) -> int:
        return self.max_sequences - self.free_slots


__all__ = ["ContiguousKVCachePool", "PagedKVCachePool"]
