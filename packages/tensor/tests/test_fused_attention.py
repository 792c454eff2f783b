"""Materialized and Flash attention against a plain numpy formula: values,
gradients, masks (causal, sliding window), grouped heads and ragged sequences."""

from __future__ import annotations

import numpy as np
import pytest
from tensor_helpers import close, on, rand

import riftco.tensor as rt

METHODS = ["flash", "materialized"]
# (batch, queries, keys, heads, kv_heads, head_dim, causal, window)
CASES = [
    (2, 7, 7, 2, 2, 8, True, 0),
    (1, 130, 130, 4, 2, 16, True, 0),
    (2, 3, 11, 2, 1, 4, True, 0),
    (1, 40, 300, 3, 3, 8, True, 17),
    (2, 5, 9, 2, 2, 8, False, 0),
    (1, 1, 1, 1, 1, 2, True, 0),
]
IDS = [f"b{c[0]}t{c[1]}s{c[2]}h{c[3]}kv{c[4]}{'c' if c[6] else 'n'}w{c[7]}" for c in CASES]


def mask(t, s, causal, window):
    if not causal:
        return np.ones((t, s), bool)
    pos = np.arange(t)[:, None] + s - t
    k = np.arange(s)[None, :]
    return (k <= pos) & ((pos - k < window) if window else True)


def np_attention(q, k, v, causal, window, scale):
    """Per-head loops in float64: out [B, T, H, Dh] and probs [B, H, T, S]."""
    b, t, h, _ = q.shape
    s, hkv = k.shape[1], k.shape[2]
    out = np.zeros(q.shape)
    probs = np.zeros((b, h, t, s))
    m = mask(t, s, causal, window)
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // hkv)
            scores = scale * q[bi, :, hi].astype(np.float64) @ k[bi, :, g].astype(np.float64).T
            scores = np.where(m, scores, -np.inf)
            e = np.exp(scores - scores.max(-1, keepdims=True))
            p = e / e.sum(-1, keepdims=True)
            probs[bi, hi] = p
            out[bi, :, hi] = p @ v[bi, :, g]
    return out, probs


def np_attention_grads(q, k, v, dout, causal, window, scale):
    b, h, hkv = q.shape[0], q.shape[2], k.shape[2]
    _, probs = np_attention(q, k, v, causal, window, scale)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // hkv)
            p, do = probs[bi, hi], dout[bi, :, hi].astype(np.float64)
            dv[bi, :, g] += p.T @ do
            dp = do @ v[bi, :, g].T
            ds = p * (dp - (p * dp).sum(-1, keepdims=True))
            dq[bi, :, hi] = scale * ds @ k[bi, :, g]
            dk[bi, :, g] += scale * ds.T @ q[bi, :, hi]
    return dq, dk, dv


def operands(case, seed=0):
    b, t, s, h, hkv, dh, _, _ = case
    return (
        rand((b, t, h, dh), seed),
        rand((b, s, hkv, dh), seed + 1),
        rand((b, s, hkv, dh), seed + 2),
    )


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_numpy(backend, case, method):
    q, k, v = operands(case)
    causal, window = case[6], case[7]
    scale = 1 / np.sqrt(q.shape[-1])
    want, probs = np_attention(q, k, v, causal, window, scale)
    out, stats = rt.attention_with_stats(
        on(backend, q), on(backend, k), on(backend, v), causal=causal, window=window, method=method
    )
    close(out, want, rtol=1e-4, atol=1e-5)
    if method == "materialized":
        close(stats[0], probs, rtol=1e-4, atol=1e-6)
        # Hidden keys get exactly zero probability.
        hidden = ~mask(q.shape[1], k.shape[1], causal, window)
        assert (stats[0].numpy()[..., hidden] == 0).all()
    else:
        b, t, h = q.shape[0], q.shape[1], q.shape[2]
        assert [x.shape for x in stats] == [(b, h, t), (b, h, t)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_backward_matches_numpy(backend, case, method):
    q, k, v = operands(case, 10)
    causal, window = case[6], case[7]
    dout = rand(q.shape, 13)
    tq, tk, tv = on(backend, q), on(backend, k), on(backend, v)
    kw = {"causal": causal, "window": window, "method": method}
    out, stats = rt.attention_with_stats(tq, tk, tv, **kw)
    grads = rt.attention_backward(on(backend, dout), tq, tk, tv, out, stats, **kw)
    want = np_attention_grads(q, k, v, dout, causal, window, 1 / np.sqrt(q.shape[-1]))
    for got, expected in zip(grads, want):
        close(got, expected, rtol=1e-3, atol=1e-5)


def test_gradient_matches_finite_differences():
    case = (1, 5, 5, 2, 1, 4, True, 3)
    q, k, v = (x.astype(np.float64) for x in operands(case, 20))
    dout = rand(q.shape, 23).astype(np.float64)
    scale = 0.5

    def loss(q_, k_, v_):
        return (np_attention(q_, k_, v_, True, 3, scale)[0] * dout).sum()

    f32 = [on("cpu", x.astype(np.float32)) for x in (q, k, v)]
    out, stats = rt.attention_with_stats(*f32, scale=scale, window=3)
    dq, dk, dv = rt.attention_backward(
        on("cpu", dout.astype(np.float32)), *f32, out, stats, scale=scale, window=3
    )
    h = 1e-6
    for got, which in ((dq, 0), (dk, 1), (dv, 2)):
        args = [q, k, v]
        flat = args[which].reshape(-1)
        for i in range(0, flat.size, 3):
            old = flat[i]
            flat[i] = old + h
            up = loss(*args)
            flat[i] = old - h
            fd = (up - loss(*args)) / (2 * h)
            flat[i] = old
            assert abs(got.numpy().reshape(-1)[i] - fd) < 1e-4, (which, i)


def test_flash_equals_materialized_and_is_thread_independent():
    case = (2, 200, 200, 4, 2, 32, True, 0)
    q, k, v = (on("cpu", x) for x in operands(case, 30))
    dout = on("cpu", rand(q.shape, 33))
    results = {}
    before = rt.get_num_threads()
    try:
        for method in METHODS:
            for threads in (1, 2):
                rt.set_num_threads(threads)
                out, stats = rt.attention_with_stats(q, k, v, method=method)
                grads = rt.attention_backward(dout, q, k, v, out, stats, method=method)
                results[method, threads] = [x.numpy().copy() for x in (out, *grads)]
    finally:
        rt.set_num_threads(before)
    for method in METHODS:
        for a, b in zip(results[method, 1], results[method, 2]):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(results["flash", 1], results["materialized", 1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_varlen_matches_each_sequence_alone(backend):
    h, hkv, dh = 4, 2, 8
    lengths, new = [9, 1, 5], [3, 1, 5]  # keys per sequence; new queries per sequence
    rng = np.random.default_rng(3)
    keys = [rng.standard_normal((n, hkv, dh)).astype(np.float32) for n in lengths]
    values = [rng.standard_normal((n, hkv, dh)).astype(np.float32) for n in lengths]
    queries = [rng.standard_normal((n, h, dh)).astype(np.float32) for n in new]
    # Keys live in a buffer with gaps, in another order than the queries.
    kv_starts = [20, 0, 6]
    buffer_k = np.zeros((32, hkv, dh), np.float32)
    buffer_v = np.zeros((32, hkv, dh), np.float32)
    for start, kk, vv in zip(kv_starts, keys, values):
        buffer_k[start : start + len(kk)], buffer_v[start : start + len(vv)] = kk, vv
    q_starts = [0, 3, 4]
    out = rt.attention_varlen(
        on(backend, np.concatenate(queries)),
        on(backend, buffer_k),
        on(backend, buffer_v),
        q_starts,
        new,
        kv_starts,
        lengths,
        window=4,
    )
    for j in range(3):
        want, _ = np_attention(
            queries[j][None], keys[j][None], values[j][None], True, 4, 1 / np.sqrt(dh)
        )
        close(out[q_starts[j] : q_starts[j] + new[j]], want[0], rtol=1e-4, atol=1e-5)


def test_attention_errors(backend):
    q, k = on(backend, rand((1, 4, 3, 8))), on(backend, rand((1, 4, 2, 8)))
    with pytest.raises(rt.ShapeError, match="multiple of Hkv"):
        rt.attention(q, k, k)
    q2, k2 = on(backend, rand((1, 5, 2, 8))), on(backend, rand((1, 4, 2, 8)))
    with pytest.raises(rt.ShapeError, match="more queries"):
        rt.attention(q2, k2, k2)
    with pytest.raises(ValueError, match="window"):
        rt.attention(k2, k2, k2, causal=False, window=2)
    with pytest.raises(ValueError, match="method"):
        rt.attention(k2, k2, k2, method="naive")
    flat = on(backend, rand((4, 2, 8)))
    with pytest.raises((rt.ShapeError, rt.KernelError)):
        rt.attention_varlen(flat, flat, flat, [0], [3], [0], [4])
