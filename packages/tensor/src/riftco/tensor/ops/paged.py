"""Paged attention: checks shapes and dtypes, then dispatches to the backend's
``paged_attention`` capability (backend API 1.3)."""

from __future__ import annotations

from collections.abc import Sequence

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import BackendMismatch, DTypeError, ShapeError
from riftco.tensor.tensor import Tensor


def paged_attention(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    page_table: Tensor,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_lengths: Sequence[int],
    *,
    scale: float,
    window: int = 0,
) -> Tensor:
    """Causal attention of packed ragged sequences over paged keys and values.

    ``q [N, H, Dh]`` float32 holds every sequence's new queries; ``k_pages`` and
    ``v_pages`` ``[P, page_size, Hkv, Dh]`` are a layer's pools; ``page_table``
    int64 ``[S, max_pages]`` lists each sequence's pages in order. Sequence j owns
    query rows ``q_starts[j] : +q_counts[j]`` and its first ``kv_lengths[j]``
    positions; its queries are its last positions. Returns ``[N, H, Dh]``.
    """
    op = "paged_attention"
    for name, t in (("q", q), ("k_pages", k_pages), ("v_pages", v_pages), ("table", page_table)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a Tensor, found {type(t).__name__}")
        if t.backend != q.backend:
            raise BackendMismatch(f"{op}: {name} is on {t.device}, q on {q.device}")
    if (
        q.dtype is not DType.float32
        or k_pages.dtype is not DType.float32
        or v_pages.dtype is not DType.float32
    ):
        raise DTypeError(f"{op}: q and the pools must be float32")
    if page_table.dtype is not DType.int64:
        raise DTypeError(f"{op}: the page table must be int64, found {page_table.dtype.value}")
    if q.ndim != 3 or k_pages.ndim != 4 or v_pages.shape != k_pages.shape:
        raise ShapeError(
            f"{op}: expected q [N, H, Dh] and pools [P, page_size, Hkv, Dh], found "
            f"{q.shape}, {k_pages.shape} and {v_pages.shape}"
        )
    heads, kv_heads = q.shape[1], k_pages.shape[2]
    if k_pages.shape[3] != q.shape[2] or heads % kv_heads:
        raise ShapeError(f"{op}: q {q.shape} does not fit pools {k_pages.shape}")
    lists = [list(map(int, x)) for x in (q_starts, q_counts, kv_lengths)]
    if page_table.ndim != 2 or any(len(x) != page_table.shape[0] for x in lists):
        raise ShapeError(
            f"{op}: a page table {page_table.shape} for segment lists of lengths "
            f"{[len(x) for x in lists]}"
        )
    return paged_attention_unchecked(
        q, k_pages, v_pages, page_table, *lists, scale=scale, window=window
    )


def paged_attention_unchecked(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    page_table: Tensor,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_lengths: Sequence[int],
    *,
    scale: float,
    window: int,
) -> Tensor:
    """`paged_attention` without the argument checks, for callers that built the
    pools and the table themselves (the backend still refuses inconsistent input)."""
    data = q.backend.paged_attention(
        q._data,
        q.shape,
        k_pages._data,
        v_pages._data,
        k_pages.shape,
        page_table._data,
        page_table.shape,
        q_starts,
        q_counts,
        kv_lengths,
        float(scale),
        int(window),
    )
    return Tensor._wrap(data, q.shape, DType.float32, q.backend)


__all__ = ["paged_attention", "paged_attention_unchecked"]
