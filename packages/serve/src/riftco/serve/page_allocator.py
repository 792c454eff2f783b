"""Page bookkeeping for the paged key/value cache: riftco-nn's `PageAllocator`
(`riftco.nn.page_allocator`: leases, reference counts, reservations and the index of
shared prompt pages), raising the server's `PoolExhausted` (a ``ServeError``)."""

from __future__ import annotations

from typing import ClassVar

from riftco.nn import page_allocator as _nn
from riftco.nn.page_allocator import PrefixKey, prefix_keys
from riftco.serve.errors import PoolExhausted


class PageAllocator(_nn.PageAllocator):
    """riftco-nn's page allocator; an exhausted pool raises `riftco.serve.PoolExhausted`."""

    exhausted: ClassVar[type[_nn.PoolExhausted]] = PoolExhausted


__all__ = ["PageAllocator", "PrefixKey", "prefix_keys"]
