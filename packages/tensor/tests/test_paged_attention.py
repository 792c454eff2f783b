"""The paged_attention capability against a plain numpy formula: ragged
sequences (decode and prefill rows), scattered page tables, grouped heads,
sliding windows, independence from the rest of the batch, and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.dtypes import DType

PAGE = 4


def np_paged(q, k_pages, v_pages, table, q_starts, q_counts, kv_lengths, scale, window):
    """Softmax attention in float64 over keys gathered through the page table."""
    out = np.zeros(q.shape, np.float64)
    heads, kv_heads = q.shape[1], k_pages.shape[2]
    for j, (qs, qn, n) in enumerate(zip(q_starts, q_counts, kv_lengths)):
        rows = [table[j, p // PAGE] * PAGE + p % PAGE for p in range(n)]
        keys = k_pages.reshape(-1, *k_pages.shape[2:])[rows].astype(np.float64)
        values = v_pages.reshape(-1, *v_pages.shape[2:])[rows].astype(np.float64)
        for i in range(qn):
            pos = n - qn + i
            visible = np.arange(n) <= pos
            if window:
                visible &= pos - np.arange(n) < window
            for h in range(heads):
                g = h // (heads // kv_heads)
                scores = keys[:, g] @ q[qs + i, h].astype(np.float64) * scale
                scores = np.where(visible, scores, -np.inf)
                p = np.exp(scores - scores.max())
                out[qs + i, h] = (p / p.sum()) @ values[:, g]
    return out


def run(backend, q, k_pages, v_pages, table, q_starts, q_counts, kv_lengths, scale, window):
    b = backend
    data = b.paged_attention(
        b.from_numpy(q),
        q.shape,
        b.from_numpy(k_pages),
        b.from_numpy(v_pages),
        k_pages.shape,
        b.from_numpy(table),
        table.shape,
        q_starts,
        q_counts,
        kv_lengths,
        scale,
        window,
    )
    return np.array(b.to_numpy(data, q.shape, DType.float32))


def problem(heads, kv_heads, dh, seed=0):
    rng = np.random.default_rng(seed)
    pages = 16
    k_pages = rng.standard_normal((pages, PAGE, kv_heads, dh)).astype(np.float32)
    v_pages = rng.standard_normal((pages, PAGE, kv_heads, dh)).astype(np.float32)
    # Three sequences: one decoding at position 9, one prefilling 6 tokens after 3
    # cached ones, one prefilling 8 from scratch over consecutive pages.
    table = np.array([[5, 0, 12, -1], [3, 9, 1, -1], [6, 7, -1, -1]], np.int64)
    q_counts, kv_lengths = [1, 6, 8], [10, 9, 8]
    q_starts = [0, 1, 7]
    q = rng.standard_normal((sum(q_counts), heads, dh)).astype(np.float32)
    return q, k_pages, v_pages, table, q_starts, q_counts, kv_lengths


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dh", "window"), [(2, 2, 8, 0), (4, 2, 8, 0), (3, 1, 4, 3)]
)
def test_matches_numpy(backend, heads, kv_heads, dh, window):
    args = problem(heads, kv_heads, dh)
    scale = 1 / np.sqrt(dh)
    got = run(backend, *args, scale, window)
    want = np_paged(*args, scale, window)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sequence_does_not_depend_on_the_batch(backend):
    q, k_pages, v_pages, table, q_starts, q_counts, kv_lengths = problem(4, 2, 8)
    both = run(backend, q, k_pages, v_pages, table, q_starts, q_counts, kv_lengths, 0.3, 0)
    alone = run(backend, q[1:7], k_pages, v_pages, table[1:2], [0], [6], [9], 0.3, 0)
    np.testing.assert_array_equal(both[1:7], alone)


def test_page_outside_the_pool_is_refused(backend):
    q, k_pages, v_pages, table, *_ = problem(2, 2, 8)
    bad = table.copy()
    bad[0, 1] = 16
    with pytest.raises(rt.RiftcoError):
        run(backend, q[:1], k_pages, v_pages, bad[:1], [0], [1], [6], 0.3, 0)
    with pytest.raises(rt.RiftcoError):  # more positions than the table row holds
        run(backend, q[:1], k_pages, v_pages, table[:1], [0], [1], [17], 0.3, 0)


def test_listed_as_a_capability():
    assert rt.CAPABILITIES["paged_attention"] == 3 <= rt.BACKEND_API_VERSION[1]
    assert "paged_attention" in type(rt.get_backend("cpu")).__dict__


def test_op_checks_arguments_before_dispatch(backend):
    q = rt.zeros(2, 4, 8, backend=backend)
    pages = rt.zeros(3, 4, 2, 8, backend=backend)
    table = rt.zeros(1, 3, dtype=rt.int64, backend=backend)
    with pytest.raises(rt.DTypeError, match="page table must be int64"):
        rt.paged_attention(q, pages, pages, table.astype(rt.float32), [0], [2], [2], scale=1.0)
    with pytest.raises(rt.ShapeError, match="does not fit pools"):
        rt.paged_attention(
            q, pages.reshape(3, 4, 4, 4), pages.reshape(3, 4, 4, 4), table, [0], [2], [2], scale=1.0
        )
    out = rt.paged_attention(q, pages, pages, table, [0], [2], [2], scale=1.0)
    assert out.shape == (2, 4, 8)
