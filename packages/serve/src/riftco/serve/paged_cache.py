"""`PagedKVCachePool`: the serving cache, riftco-nn's `PagedKVCache`
(`riftco.nn.paged_cache`: per-layer pools in pages, a page table per sequence, shared
full prompt pages, transactional steps, whole-step decoding) over the server's
`PageAllocator`, so an exhausted pool raises `riftco.serve.PoolExhausted`."""

from __future__ import annotations

from typing import ClassVar

from riftco.nn import page_allocator as _pages
from riftco.nn.paged_cache import PagedKVCache
from riftco.serve.page_allocator import PageAllocator


class PagedKVCachePool(PagedKVCache):
    """A paged key/value cache for ``config``'s layers, with ``pages`` pages of
    ``page_size`` token positions each (riftco-nn's `PagedKVCache`); implements
    ``riftco.nn.KVCache``."""

    allocator_type: ClassVar[type[_pages.PageAllocator]] = PageAllocator


__all__ = ["PagedKVCachePool"]
