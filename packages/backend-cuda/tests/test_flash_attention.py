"""FlashAttention-2 on the tensor cores (``driver/kernels/flash.cu``, ``ops/flash.py``)
on the host emulation: ``mma.sync`` and the warp shuffles run from the PTX ISA's
fragment table (``emulator/shim.h``), so the kernels' fragment indexing, tiling,
causal masks, online softmax and the dq / dk, dv split are what is checked here,
against a float64 numpy formula and against the cuBLAS route, with the launches
counted."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops import flash

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation
from test_attention_products import _mask, _reference

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

BF16 = np.dtype(ml_dtypes.bfloat16)
# (batch, queries, keys, heads, head_dim, causal): several tiles of 64 with tails,
# more keys than queries, every compiled head dimension.
CASES = [
    (2, 70, 70, 2, 16, True),
    (1, 40, 100, 2, 32, True),
    (1, 33, 50, 1, 64, False),
    (1, 130, 130, 1, 64, True),
]
IDS = [f"b{c[0]}t{c[1]}s{c[2]}h{c[3]}d{c[4]}{'c' if c[5] else 'n'}" for c in CASES]


class Recording(cuda_emulation.EmulatedCudaBackend):
    """The emulated backend, naming every kernel it launches and counting products."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel_names: Counter[str] = Counter()
        self.products = 0
        launch, gemm, epilogue = self.device.launch, self.device.gemm, self.device.gemm_epilogue

        def named(module, kernel, *rest):
            self.kernel_names[kernel] += 1
            launch(module, kernel, *rest)

        def counted(*args, **kw):
            self.products += 1
            gemm(*args, **kw)

        def counted_epilogue(*args, **kw):
            self.products += 1
            epilogue(*args, **kw)

        self.device.launch = named  # type: ignore[method-assign]
        self.device.gemm = counted  # type: ignore[method-assign]
        self.device.gemm_epilogue = counted_epilogue  # type: ignore[method-assign]

    def forget(self) -> None:
        self.kernel_names.clear()
        self.products = 0


@pytest.fixture(scope="module")
def emu():
    return Recording()


def _inputs(case, seed=0):
    b, t, s, h, dh, _causal = case
    rng = np.random.default_rng(seed + sum(case[:5]))
    q, k, v = (rng.normal(0, 1, (b, n, h, dh)).astype(BF16) for n in (t, s, s))
    dout = rng.normal(0, 1, (b, t, h, dh)).astype(np.float32)
    return q, k, v, dout


def _run(emu, q, k, v, dout, causal):
    tq, tk, tv = (rt.from_numpy(x, backend=emu) for x in (q, k, v))
    emu.forget()
    out, stats = rt.attention_with_stats(tq, tk, tv, causal=causal, compute="bfloat16")
    forward = (dict(emu.kernel_names), emu.products)
    emu.forget()
    grads = rt.attention_backward(
        rt.from_numpy(dout, backend=emu), tq, tk, tv, out, stats, causal=causal,
        compute="bfloat16",
    )  # fmt: skip
    backward = (dict(emu.kernel_names), emu.products)
    return out.numpy(), [x.numpy() for x in stats], [g.numpy() for g in grads], forward, backward


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_flash_attention_matches_numpy_in_three_launches(emu, case):
    b, t, s, h, dh, causal = case
    q, k, v, dout = _inputs(case)
    scale = 1 / np.sqrt(dh)
    want_out, want_probs, want_grads = _reference(q, k, v, dout, causal, scale)
    out, (row_max, row_sum), grads, forward, backward = _run(emu, q, k, v, dout, causal)

    assert forward == ({f"flash_forward_bf16_d{dh}": 1}, 0)
    assert backward == ({f"flash_dq_bf16_d{dh}": 1, f"flash_dkv_bf16_d{dh}": 1}, 0)
    # bfloat16 probabilities times bfloat16 v: within bfloat16's rounding of the values.
    bound = 2.0**-8 * np.abs(v.astype(np.float32)).max()
    assert np.abs(out - want_out).max() <= bound + 1e-6
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=2**-6, atol=2**-6 * np.abs(want).max())
    # The flash statistics: the row's largest scaled score and the sum of exp(s - max).
    qh, kh = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k))
    scores = np.where(_mask(t, s, causal), scale * qh @ kh.swapaxes(-1, -2), -np.inf)
    top = scores.max(-1)
    np.testing.assert_allclose(row_max, top, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(row_sum, np.exp(scores - top[..., None]).sum(-1), rtol=1e-5)
    assert want_probs.shape == (b, h, t, s)


def _grouped_reference(q, k, v, dout, causal, window, scale):
    """float64 out, dq, dk, dv with query head h reading key/value head h // (H / Hkv)
    and, causal, keys less than ``window`` positions back (0: all)."""
    h, hkv = q.shape[2], k.shape[2]
    rep = h // hkv
    kx, vx = (np.repeat(x.astype(np.float64), rep, axis=2) for x in (k, v))
    qh, kh, vh, gh = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, kx, vx, dout))
    t, s = q.shape[1], k.shape[1]
    pos = np.arange(t)[:, None] + s - t
    keys = np.arange(s)[None, :]
    seen = np.ones((t, s), bool)
    if causal:
        seen = (keys <= pos) & ((window <= 0) | (pos - keys < window))
    scores = np.where(seen, scale * qh @ kh.swapaxes(-1, -2), -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = gh @ vh.swapaxes(-1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    out, dq = p @ vh, scale * ds @ kh
    dk, dv = scale * ds.swapaxes(-1, -2) @ qh, p.swapaxes(-1, -2) @ gh
    b = q.shape[0]
    # Each key/value head's gradient sums its group's query heads.
    dk, dv = (x.reshape(b, hkv, rep, s, -1).sum(2) for x in (dk, dv))
    return [x.transpose(0, 2, 1, 3) for x in (out, dq, dk, dv)]


@pytest.mark.parametrize(
    "case",
    [
        (2, 70, 70, 4, 2, 16, True, 0),
        (1, 100, 130, 6, 2, 32, True, 40),
        (1, 90, 90, 2, 2, 64, True, 17),
    ],
    ids=["grouped", "grouped-window-more-keys", "window"],
)
def test_grouped_heads_and_windows_take_flash_attention_too(emu, case):
    # A query head reads its group's key/value head; dk and dv sum the group's query
    # heads in order; a window hides keys w or more positions back (and skips the tiles
    # no row of a block sees).
    b, t, s, h, hkv, dh, causal, window = case
    rng = np.random.default_rng(t + s + h)
    q = rng.normal(0, 1, (b, t, h, dh)).astype(BF16)
    k, v = (rng.normal(0, 1, (b, s, hkv, dh)).astype(BF16) for _ in range(2))
    dout = rng.normal(0, 1, (b, t, h, dh)).astype(np.float32)
    tq, tk, tv = (rt.from_numpy(x, backend=emu) for x in (q, k, v))
    kw = dict(causal=causal, window=window, compute="bfloat16")
    emu.forget()
    out, stats = rt.attention_with_stats(tq, tk, tv, **kw)
    grads = rt.attention_backward(rt.from_numpy(dout, backend=emu), tq, tk, tv, out, stats, **kw)
    assert sorted(emu.kernel_names) == [f"flash_{p}_bf16_d{dh}" for p in ("dkv", "dq", "forward")]
    want = _grouped_reference(q, k, v, dout, causal, window, 1 / np.sqrt(dh))
    for got, w in zip([out, *grads], want):
        np.testing.assert_allclose(got.numpy(), w, rtol=2**-6, atol=2**-6 * np.abs(w).max())


def test_flash_attention_repeats_its_bits(emu):
    case = CASES[0]
    q, k, v, dout = _inputs(case, seed=5)
    first = _run(emu, q, k, v, dout, case[5])
    again = _run(emu, q, k, v, dout, case[5])
    for a, b in zip([first[0], *first[1], *first[2]], [again[0], *again[1], *again[2]]):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_statistics_are_shared_with_the_cublas_route(emu, monkeypatch):
    # A forward of one route and a backward of the other agree: both write and read the
    # same flash statistics.
    case = (1, 70, 70, 2, 16, True)
    q, k, v, dout = _inputs(case, seed=9)
    tq, tk, tv = (rt.from_numpy(x, backend=emu) for x in (q, k, v))
    g = rt.from_numpy(dout, backend=emu)
    kw = dict(causal=True, compute="bfloat16")
    out, stats = rt.attention_with_stats(tq, tk, tv, **kw)
    flash_grads = [x.numpy() for x in rt.attention_backward(g, tq, tk, tv, out, stats, **kw)]
    monkeypatch.setenv("RIFTCO_CUDA_FLASH", "0")
    emu.forget()
    cublas_grads = [x.numpy() for x in rt.attention_backward(g, tq, tk, tv, out, stats, **kw)]
    assert emu.kernel_names["attention_softmax_dscores_f32"] == 1
    assert not [n for n in emu.kernel_names if n.startswith("flash_")]
    for a, b in zip(flash_grads, cublas_grads):
        np.testing.assert_allclose(a, b, rtol=2**-6, atol=2**-6 * np.abs(b).max())
    cublas_out, cublas_stats = rt.attention_with_stats(tq, tk, tv, **kw)
    np.testing.assert_allclose(cublas_out.numpy(), out.numpy(), atol=2**-7)
    np.testing.assert_allclose(cublas_stats[0].numpy(), stats[0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cublas_stats[1].numpy(), stats[1].numpy(), rtol=1e-5)


@pytest.mark.parametrize("heads, kv_heads, window", [(2, 2, 0), (4, 2, 0), (4, 2, 9)])
def test_projected_attention_reads_and_writes_the_stacked_matrices(
    emu, monkeypatch, heads, kv_heads, window
):
    # bf16 compute: three products into the stacked projection, one flash launch reading
    # q, k and v from its columns; backward two flash launches writing dq, dk and dv
    # into the stacked gradient's columns, then the projections' products -- against the
    # same op on the cuBLAS route (or, grouped or windowed, the row kernels).
    rng = np.random.default_rng(4 + heads + window)
    batch, t, dh = 2, 40, 16
    d = heads * dh
    sizes = (heads * dh, kv_heads * dh, kv_heads * dh)
    x = rng.normal(0, 1, (batch, t, d)).astype(np.float32)
    ws = [rng.normal(0, 0.3, (n, d)).astype(np.float32) for n in sizes]
    bs = [rng.normal(0, 0.1, (n,)).astype(np.float32) for n in sizes]
    g = rng.normal(0, 1, (batch, t, d)).astype(np.float32)

    def run():
        tx = rt.from_numpy(x, backend=emu)
        tw = [rt.from_numpy(w, backend=emu) for w in ws]
        tb = [rt.from_numpy(b_, backend=emu) for b_ in bs]
        emu.forget()
        out, state = rt.projected_attention_with_state(
            tx, tw, tb, heads=heads, kv_heads=kv_heads, head_dim=dh, causal=True, window=window,
            compute="bfloat16",
        )  # fmt: skip
        forward = dict(emu.kernel_names)
        emu.forget()
        dx, dws, dbs = rt.projected_attention_backward(rt.from_numpy(g, backend=emu), state, True)
        backward = dict(emu.kernel_names)
        return (
            [out.numpy(), dx.numpy(), *(w.numpy() for w in dws), *(b_.numpy() for b_ in dbs)],
            forward,
            backward,
        )

    got, forward, backward = run()
    assert forward == {"flash_forward_f32_d16": 1}
    assert backward == {"flash_dq_f32_d16": 1, "flash_dkv_f32_d16": 1, "reduce_cols_parts_f32": 1}
    monkeypatch.setenv("RIFTCO_CUDA_FLASH", "0")
    want, forward, _ = run()
    assert not [k for k in forward if k.startswith("flash_")]
    for a, b in zip(got[:5], want[:5]):
        np.testing.assert_allclose(a, b, rtol=2**-5, atol=2**-6 * np.abs(b).max())
    # The key bias's gradient is 0 in exact arithmetic (a bias on every key shifts a
    # row's scores alike): what both routes give is rounding, so the bound is the bias
    # gradients' scale.
    scale = max(np.abs(b).max() for b in want[5:])
    for a, b in zip(got[5:], want[5:]):
        np.testing.assert_allclose(a, b, atol=2**-6 * scale)


@pytest.mark.parametrize(
    "arch, heads, kv_heads, head_dim, window, flashed",
    [
        ("sm_90", 2, 2, 64, 0, True),
        ("sm_80", 2, 2, 32, 0, True),
        ("sm_75", 2, 2, 64, 0, False),  # no bfloat16 mma.sync before Ampere
        ("sm_90", 2, 2, 8, 0, False),  # a head dimension the kernels are not built for
        ("sm_90", 4, 2, 64, 0, True),  # grouped heads
        ("sm_90", 2, 2, 64, 16, True),  # a window
        ("sm_90", 3, 2, 64, 0, False),  # heads that do not group: refused further up
    ],
)
def test_the_route_is_flash_only_where_the_kernels_apply(
    arch, heads, kv_heads, head_dim, window, flashed
):
    backend = cuda_emulation.EmulatedCudaBackend()
    backend.device.arch = arch
    assert backend._flash_route(1, 8, 8, heads, kv_heads, head_dim, True, window) is flashed
    assert flash.tensor_cores(arch) is (arch != "sm_75")
    # Causal with fewer keys than queries leaves rows that see nothing: not flash.
    assert backend._flash_route(1, 8, 4, 2, 2, 64, True, 0) is False
    assert backend._flash_route(1, 8, 4, 2, 2, 64, False, 0) is (arch != "sm_75")
