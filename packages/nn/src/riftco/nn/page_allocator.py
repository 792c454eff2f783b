"""Page bookkeeping for a paged key/value cache: leases, reference counts,
reservations and an index of full prompt pages that sequences may share.

A page is *free* (never filled or forgotten), *in use* (held by one or more
sequences) or *cached* (a full prompt page nobody holds any more, kept in the
prefix index until its room is needed, least recently released first). Only
full pages enter the index and a sequence only ever writes past its own
length, so a shared page is never written again: sharing needs no copy (a sequence
that rolls back into a shared page first takes a private copy of it: see
`riftco.nn.PagedKVCache.truncate`).

Free pages are leased lowest first, and a sequence's pages go back so that the next
leases take them in the same order: a sequence that grows alone in a pool holds
physically consecutive pages, which the attention kernels read in the same tiles as a
contiguous cache's rows.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from riftco.nn.errors import CacheError, PoolExhausted

PrefixKey = bytes


def prefix_keys(tokens: Sequence[int], page_size: int) -> list[PrefixKey]:
    """One key per full page of ``tokens``: key i identifies ``tokens[: (i + 1) * page_size]``
    (a hash chain, so equal keys mean equal prefixes, not just equal pages)."""
    keys, previous = [], b""
    ids = np.asarray(tokens, dtype=np.int64)
    for i in range(len(ids) // page_size):
        digest = hashlib.blake2b(previous, digest_size=16)
        digest.update(ids[i * page_size : (i + 1) * page_size].tobytes())
        previous = digest.digest()
        keys.append(previous)
    return keys


class PageAllocator:
    """Leases pages ``0..pages-1``; counts references; keeps the prefix index.

    ``reserve``/``unreserve`` set pages aside for sequences admitted but not yet
    grown into them, so admission can promise room that later leases will find.
    ``exhausted`` is the error type raised when a lease or a reservation finds no room
    (a server uses its own subclass of `PoolExhausted`).
    """

    exhausted: ClassVar[type[PoolExhausted]] = PoolExhausted

    def __init__(self, pages: int) -> None:
        if pages <= 0:
            raise CacheError(f"PageAllocator: the pool needs at least one page, found {pages}")
        self.pages = pages
        self._free = list(range(pages - 1, -1, -1))
        self._cached: OrderedDict[int, None] = OrderedDict()
        self._refs = [0] * pages
        self._key_of: list[PrefixKey | None] = [None] * pages
        self._index: dict[PrefixKey, int] = {}
        self._reserved = 0

    # -- counts -----------------------------------------------------------------
    @property
    def in_use(self) -> int:
        """Pages held by at least one sequence."""
        return self.pages - len(self._free) - len(self._cached)

    @property
    def cached(self) -> int:
        """Full prompt pages kept for sharing that nobody holds."""
        return len(self._cached)

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def available(self) -> int:
        """Pages a new reservation may take (free or cached, minus reservations)."""
        return len(self._free) + len(self._cached) - self._reserved

    def refs(self, page: int) -> int:
        return self._refs[page]

    # -- reservations -----------------------------------------------------------
    def reserve(self, count: int) -> None:
        if count > self.available:
            raise self.exhausted(
                f"the key/value pool has {self.available} pages available "
                f"({self.in_use} in use, {self._reserved} reserved, {self.pages} in all); "
                f"{count} are needed"
            )
        self._reserved += count

    def unreserve(self, count: int) -> None:
        if not 0 <= count <= self._reserved:
            raise CacheError(f"unreserve: {count} pages, but {self._reserved} are reserved")
        self._reserved -= count

    # -- leases -----------------------------------------------------------------
    def lease(self, reserved: bool = False) -> int:
        """A page for writing (its previous content is garbage). ``reserved``: take
        it out of an existing reservation."""
        if reserved:
            self.unreserve(1)
        elif self.available < 1:
            raise self.exhausted(
                f"the key/value pool is exhausted ({self.in_use} pages in use, "
                f"{self._reserved} reserved, {self.pages} in all)"
            )
        if self._free:
            page = self._free.pop()
        else:
            page, _ = self._cached.popitem(last=False)
            self._forget(page)
        self._refs[page] = 1
        return page

    def release(self, page: int) -> None:
        """Drop one reference; the last one frees the page (or caches an indexed one)."""
        if self._refs[page] <= 0:
            raise CacheError(f"release: page {page} is not leased")
        self._refs[page] -= 1
        if self._refs[page] == 0:
            if self._key_of[page] is not None:
                self._cached[page] = None
            else:
                self._free.append(page)

    # -- prefix sharing ---------------------------------------------------------
    def share(self, key: PrefixKey) -> int | None:
        """Take a reference to the page indexed under ``key``, if there is one."""
        page = self._index.get(key)
        if page is None:
            return None
        if self._refs[page] == 0:
            if self.available < 1:  # reviving it would break a reservation
                return None
            self._cached.pop(page)
        self._refs[page] += 1
        return page

    def publish(self, page: int, key: PrefixKey) -> None:
        """Index a full page under its prefix key (a page already indexed under
        that key wins; this one stays private)."""
        if self._refs[page] <= 0:
            raise CacheError(f"publish: page {page} is not leased")
        if key not in self._index and self._key_of[page] is None:
            self._index[key] = page
            self._key_of[page] = key

    def unpublish(self, page: int) -> None:
        """Take a page held by exactly one sequence out of the prefix index (it is
        about to be written again)."""
        if self._refs[page] != 1:
            raise CacheError(
                f"unpublish: page {page} has {self._refs[page]} references; expected 1"
            )
        self._forget(page)

    def _forget(self, page: int) -> None:
        key = self._key_of[page]
        if key is not None:
            del self._index[key]
            self._key_of[page] = None


__all__ = ["PageAllocator", "PrefixKey", "prefix_keys"]
