"""PageAllocator: leases, references, reservations and the prefix index."""

import pytest

from riftco.serve import CacheError, PoolExhausted
from riftco.serve.page_allocator import PageAllocator, prefix_keys


def test_prefix_keys_identify_whole_prefixes():
    a = prefix_keys([1, 2, 3, 4, 5, 6, 7], 3)
    b = prefix_keys([1, 2, 3, 4, 5, 6], 3)
    c = prefix_keys([9, 2, 3, 4, 5, 6], 3)
    assert len(a) == 2 and a == b
    assert c[1] != a[1]  # same second page, different prefix


def test_lease_release_and_exhaustion():
    pool = PageAllocator(3)
    pages = [pool.lease() for _ in range(3)]
    assert sorted(pages) == [0, 1, 2] and pool.in_use == 3
    with pytest.raises(PoolExhausted):
        pool.lease()
    pool.release(pages[1])
    assert pool.lease() == pages[1]
    with pytest.raises(CacheError):
        PageAllocator(2).release(0)


def test_reservations_are_kept_for_their_owner():
    pool = PageAllocator(4)
    pool.reserve(3)
    assert pool.available == 1
    with pytest.raises(PoolExhausted):
        pool.reserve(2)
    pool.lease()  # the one unreserved page
    with pytest.raises(PoolExhausted):
        pool.lease()
    for _ in range(3):
        pool.lease(reserved=True)
    assert pool.reserved == 0 and pool.in_use == 4


def test_shared_pages_are_counted_and_cached_after_release():
    pool = PageAllocator(3)
    key = prefix_keys([1, 2], 2)[0]
    page = pool.lease()
    pool.publish(page, key)
    assert pool.share(key) == page and pool.refs(page) == 2
    pool.release(page)
    pool.release(page)
    assert pool.in_use == 0 and pool.cached == 1 and pool.available == 3
    assert pool.share(key) == page  # revived from the cache
    pool.release(page)
    others = [pool.lease(), pool.lease()]
    assert page not in others
    assert pool.lease() == page  # the cached page is reused last ...
    assert pool.share(key) is None  # ... and forgotten then


def test_a_cached_page_is_not_revived_into_someone_elses_reservation():
    pool = PageAllocator(2)
    key = prefix_keys([1, 2], 2)[0]
    page = pool.lease()
    pool.publish(page, key)
    pool.release(page)
    pool.lease()
    pool.reserve(1)  # promises the cached page's room
    assert pool.share(key) is None
    pool.lease(reserved=True)
