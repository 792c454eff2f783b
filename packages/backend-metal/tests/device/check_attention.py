"""The attention paths against each other and a float64 reference (run by
../test_on_device.py): the ``tiled`` dense forward (key/value tiles shared through
workgroup memory) gives what the ``rows`` forward gives, and both match numpy, over
causal, windowed, grouped-query and cross-length cases; and repeats bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from riftco.backends.metal import attention
from riftco.backends.metal.runtime import Runtime
from riftco.tensor.plugin import DType

# (B, T, S, H, Hkv, Dh, causal, window)
CASES = [
    (1, 1, 1, 1, 1, 1, True, 0),
    (2, 70, 70, 4, 2, 16, True, 0),
    (1, 130, 130, 2, 2, 64, True, 17),
    (2, 5, 90, 3, 1, 8, False, 0),
    (1, 33, 40, 2, 1, 256, True, 0),
    (1, 65, 65, 2, 2, 100, False, 0),
]


def _reference(q, k, v, scale, causal, window):
    _, t, h, _ = q.shape
    s, hkv = k.shape[1], k.shape[2]
    out = np.zeros(q.shape, np.float64)
    for hi in range(h):
        kh = hi // (h // hkv)
        scores = np.einsum("btd,bsd->bts", q[:, :, hi], k[:, :, kh]) * scale
        pos = np.arange(t)[:, None] + s - t
        keys = np.arange(s)[None, :]
        visible = np.ones((t, s), bool)
        if causal:
            visible = keys <= pos
            if window:
                visible &= keys > pos - window
        scores = np.where(visible, scores, -np.inf)
        top = scores.max(-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        w = np.exp(scores - top)
        total = w.sum(-1, keepdims=True)
        out[:, :, hi] = np.einsum("bts,bsd->btd", w / np.where(total > 0, total, 1), v[:, :, kh])
    return out


@pytest.mark.parametrize("case", CASES)
def test_tiled_forward_matches_rows_and_float64(gpu, case):
    b, t, s, h, hkv, dh, causal, window = case
    rng = np.random.default_rng(sum(case[:6]))
    q = rng.standard_normal((b, t, h, dh)).astype(np.float32)
    k = rng.standard_normal((b, s, hkv, dh)).astype(np.float32)
    v = rng.standard_normal((b, s, hkv, dh)).astype(np.float32)
    scale = 1.0 / np.sqrt(dh)
    want = _reference(q.astype(np.float64), k, v, scale, causal, window)
    got = {}
    for path in ("rows", "tiled"):
        run = Runtime(gpu.device, attention_path=path)
        qd, kd, vd = (run.upload(x, DType.float32) for x in (q, k, v))
        out, mx, sm, _ = attention.forward(run, qd, kd, vd, q.shape, k.shape, scale, causal, window)
        again, _, _, _ = attention.forward(run, qd, kd, vd, q.shape, k.shape, scale, causal, window)
        got[path] = [run.download(x) for x in (out, mx, sm)]
        assert run.download(again).tobytes() == got[path][0].tobytes(), f"{path} repeats"
        np.testing.assert_allclose(
            got[path][0].reshape(want.shape), want, rtol=2e-5, atol=2e-6, err_msg=path
        )
    for a, r in zip(got["tiled"], got["rows"], strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("saved_probs", [False, True])
def test_tiled_backward_matches_rows(gpu, case, saved_probs):
    """dq, dk and dv of the tiled kernels against the row kernels (which the shared
    suite holds to the CPU backend), recomputing p from the row statistics (flash)
    or reading the saved probabilities (materialized); and bit for bit on a repeat."""
    b, t, s, h, hkv, dh, causal, window = case
    rng = np.random.default_rng(100 + sum(case[:6]))
    q = rng.standard_normal((b, t, h, dh)).astype(np.float32)
    k = rng.standard_normal((b, s, hkv, dh)).astype(np.float32)
    v = rng.standard_normal((b, s, hkv, dh)).astype(np.float32)
    dout = rng.standard_normal((b, t, h, dh)).astype(np.float32)
    scale = 1.0 / np.sqrt(dh)
    got = {}
    for path in ("rows", "tiled"):
        run = Runtime(gpu.device, attention_path=path)
        qd, kd, vd, od = (run.upload(x, DType.float32) for x in (q, k, v, dout))
        args = (qd, kd, vd, q.shape, k.shape, scale, causal, window)
        if saved_probs:
            _, probs = attention.attention(run, *args)
            grads = attention.backward(
                run, od, qd, kd, vd, probs, None, None, q.shape, k.shape, scale, causal, window
            )
        else:
            _, mx, sm, _ = attention.forward(run, *args)
            grads = attention.backward(
                run, od, qd, kd, vd, None, mx, sm, q.shape, k.shape, scale, causal, window
            )
        got[path] = [run.download(g) for g in grads]
        if path == "tiled":
            again = attention.backward(
                run, od, qd, kd, vd, None if not saved_probs else probs,
                None if saved_probs else mx, None if saved_probs else sm,
                q.shape, k.shape, scale, causal, window,
            )  # fmt: skip
            assert [run.download(g).tobytes() for g in again] == [g.tobytes() for g in got[path]]
    for name, a, r in zip(("dq", "dk", "dv"), got["tiled"], got["rows"], strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-6, err_msg=name)


# (query counts, key lengths, H, Hkv, Dh, window): ragged sequences, prompts and
# single decode queries, keys past one 64-key tile.
PACKED = [
    ((1,), (1,), 1, 1, 1, 0),
    ((3, 1, 5), (3, 70, 9), 4, 2, 16, 0),
    ((1, 1), (130, 65), 2, 1, 64, 17),
    ((2, 4), (40, 4), 2, 2, 256, 0),
    ((6,), (6,), 3, 3, 100, 3),
]


def _cpu():
    import riftco.tensor as rt

    return rt.get_backend("cpu")


@pytest.mark.parametrize("case", PACKED)
@pytest.mark.parametrize("layout", ["varlen", "paged"])
def test_tiled_varlen_and_paged_match_rows_and_the_cpu(gpu, case, layout):
    """Varlen and paged attention on the tiled path (a workgroup per (query row, head)
    over 64-key tiles) against the row kernel and the CPU backend; repeats bit for bit."""
    counts, lengths, h, hkv, dh, window = case
    rng = np.random.default_rng(sum(lengths) + dh)
    n = sum(counts)
    q = rng.standard_normal((n, h, dh)).astype(np.float32)
    q_starts = tuple(int(x) for x in np.cumsum((0, *counts))[:-1])
    scale = 1.0 / np.sqrt(dh)
    cpu = _cpu()
    if layout == "varlen":
        kv_starts = tuple(int(x) for x in np.cumsum((0, *lengths))[:-1])
        m = sum(lengths)
        k = rng.standard_normal((m, hkv, dh)).astype(np.float32)
        v = rng.standard_normal((m, hkv, dh)).astype(np.float32)

        def call(backend, up):
            return backend.attention_varlen(
                up(q), up(k), up(v), q.shape, k.shape, q_starts, counts, kv_starts, lengths,
                scale, window,
            )  # fmt: skip
    else:
        ps = 8
        width = max(-(-x // ps) for x in lengths)
        pages = len(lengths) * width + 3
        order = rng.permutation(pages)[: len(lengths) * width]
        table = order.reshape(len(lengths), width).astype(np.int64)
        k = rng.standard_normal((pages, ps, hkv, dh)).astype(np.float32)
        v = rng.standard_normal((pages, ps, hkv, dh)).astype(np.float32)

        def call(backend, up):
            return backend.paged_attention(
                up(q), q.shape, up(k), up(v), k.shape, up(table), table.shape, q_starts,
                counts, lengths, scale, window,
            )  # fmt: skip

    want = cpu.to_numpy(call(cpu, cpu.from_numpy), q.shape, DType.float32)
    got = {}
    for path in ("rows", "tiled"):
        gpu.rt.attention_path = path
        try:
            first = call(gpu, gpu.from_numpy)
            again = call(gpu, gpu.from_numpy)
            got[path] = gpu.rt.download(first).reshape(q.shape)
            assert gpu.rt.download(again).tobytes() == got[path].tobytes(), f"{path} repeats"
        finally:
            gpu.rt.attention_path = "rows" if gpu.runs_on_host else "tiled"
        np.testing.assert_allclose(got[path], want, rtol=2e-5, atol=2e-6, err_msg=path)
    np.testing.assert_allclose(got["tiled"], got["rows"], rtol=2e-5, atol=2e-6)
