"""Dense attention's cuBLAS route on the host emulation (``cudaemu``): q, k and v moved
heads first by one ``swap_heads`` launch, every product one strided-batched call over
all batch rows and heads, the backward's probabilities and score gradient in one
launch. Checked against a float64 numpy formula (float32 and bfloat16 inputs, flash and
materialized, causal with as many or more keys than queries), and the kernels on their
own: the head swap against numpy's transpose and rounding, the fused backward pass
against the two kernels it replaces, bit for bit."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.errors import CudaError
from riftco.backends.cuda.ops import attention as attention_ops
from riftco.tensor.plugin import DType

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

BF16 = np.dtype(ml_dtypes.bfloat16)
# (batch, queries, keys, heads, head_dim, causal)
CASES = [(2, 6, 6, 3, 8, True), (2, 4, 7, 2, 4, True), (1, 5, 9, 2, 8, False)]
IDS = [f"b{c[0]}t{c[1]}s{c[2]}h{c[3]}d{c[4]}{'c' if c[5] else 'n'}" for c in CASES]


class Recording(cuda_emulation.EmulatedCudaBackend):
    """The emulated backend, naming every kernel it launches and counting products."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel_names: Counter[str] = Counter()
        self.products: list[int] = []  # the batch of each product
        self.elements: list[str] = []  # and its operands' type (-> a compute type)
        launch, gemm = self.device.launch, self.device.gemm

        def named(module, kernel, *rest):
            self.kernel_names[kernel] += 1
            launch(module, kernel, *rest)

        def counted(element, m, n, k, a, b, c, batch, compute="float32"):
            self.products.append(int(batch))
            self.elements.append(element if compute == "float32" else f"{element}->{compute}")
            gemm(element, m, n, k, a, b, c, batch, compute)

        self.device.launch = named  # type: ignore[method-assign]
        self.device.gemm = counted  # type: ignore[method-assign]

    def forget(self) -> None:
        self.kernel_names.clear()
        self.products.clear()
        self.elements.clear()


@pytest.fixture(scope="module")
def emu():
    return Recording()


def _mask(t, s, causal):
    if not causal:
        return np.ones((t, s), bool)
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + s - t


def _reference(q, k, v, dout, causal, scale):
    """float64 out [B, T, H, Dh], probs [B, H, T, S] and dq, dk, dv."""
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    qh, kh, vh, dh_ = (x.transpose(0, 2, 1, 3) for x in (q, k, v, dout))
    scores = np.where(
        _mask(q.shape[1], k.shape[1], causal), scale * qh @ kh.swapaxes(-1, -2), -np.inf
    )
    e = np.exp(scores - scores.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    out = p @ vh
    dp = dh_ @ vh.swapaxes(-1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq, dk, dv = scale * ds @ kh, scale * ds.swapaxes(-1, -2) @ qh, p.swapaxes(-1, -2) @ dh_
    back = (x.transpose(0, 2, 1, 3) for x in (out, dq, dk, dv))
    out, dq, dk, dv = back
    return out, p, (dq, dk, dv)


@pytest.mark.parametrize("method", ["flash", "materialized"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_cublas_route_matches_numpy(emu, case, dtype, method):
    b, t, s, h, dh, causal = case
    rng = np.random.default_rng(sum(case[:5]))
    q, k, v = (rng.normal(0, 1, (b, n, h, dh)).astype(np.float32) for n in (t, s, s))
    if dtype == "bfloat16":
        q, k, v = (x.astype(BF16) for x in (q, k, v))
    dout = rng.normal(0, 1, (b, t, h, dh)).astype(np.float32)
    scale = 1 / np.sqrt(dh)
    want_out, want_probs, want_grads = _reference(q, k, v, dout, causal, scale)

    tq, tk, tv = (rt.from_numpy(x, backend=emu) for x in (q, k, v))
    emu.forget()
    out, stats = rt.attention_with_stats(tq, tk, tv, causal=causal, method=method)
    forward = (dict(emu.kernel_names), list(emu.products))
    emu.forget()
    grads = rt.attention_backward(
        rt.from_numpy(dout, backend=emu), tq, tk, tv, out, stats, causal=causal, method=method
    )
    backward = (dict(emu.kernel_names), list(emu.products))

    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-4, atol=1e-5)
    if method == "materialized":
        np.testing.assert_allclose(stats[0].numpy(), want_probs, rtol=1e-4, atol=1e-6)
        hidden = ~_mask(t, s, causal)
        assert (stats[0].numpy()[..., hidden] == 0).all()
    for got, want in zip(grads, want_grads):
        assert got.dtype is rt.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-3, atol=1e-5)

    # Forward: the swap in, the scores, the softmax, the values, the swap back.
    assert forward == ({"swap_heads": 2, "attention_softmax_f32": 1}, [b * h] * 2)
    # Backward: the swap in, dp (and the scores again), one row pass, dv, dq, dk, the
    # swap back.
    rows = "attention_softmax_dscores_f32" if method == "flash" else "attention_dscores_f32"
    assert backward == ({"swap_heads": 2, rows: 1}, [b * h] * (5 if method == "flash" else 4))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compute_puts_every_product_on_the_tensor_cores(emu, case):
    # flash_attention_compute / flash_attention_backward_compute (API 1.12): every
    # product reads bfloat16 operands -- q, k and v as they are, the output gradient
    # rounded as it moves heads first, the probabilities and the scores' gradient
    # written rounded by the row passes -- within bfloat16's rounding of the float64
    # formula, and not the float32 products' bits.
    b, t, s, h, dh, causal = case
    rng = np.random.default_rng(sum(case[:5]) + 1)
    q, k, v = (rng.normal(0, 1, (b, n, h, dh)).astype(BF16) for n in (t, s, s))
    dout = rng.normal(0, 1, (b, t, h, dh)).astype(np.float32)
    want_out, _, want_grads = _reference(q, k, v, dout, causal, 1 / np.sqrt(dh))
    tq, tk, tv = (rt.from_numpy(x, backend=emu) for x in (q, k, v))
    plain, _ = rt.attention_with_stats(tq, tk, tv, causal=causal)
    emu.forget()
    out, stats = rt.attention_with_stats(tq, tk, tv, causal=causal, compute="bfloat16")
    forward = (dict(emu.kernel_names), list(emu.elements))
    emu.forget()
    grads = rt.attention_backward(
        rt.from_numpy(dout, backend=emu), tq, tk, tv, out, stats, causal=causal,
        compute="bfloat16",
    )  # fmt: skip
    backward = (dict(emu.kernel_names), list(emu.elements))
    assert forward == ({"swap_heads": 2, "attention_softmax_f32": 1}, ["bfloat16"] * 2)
    rows = {"swap_heads": 2, "attention_softmax_dscores_f32": 1}
    assert backward == (rows, ["bfloat16"] * 5)  # dp, the scores, dv, dq, dk
    assert not np.array_equal(out.numpy(), plain.numpy())
    bound = 2.0**-8 * np.abs(v.astype(np.float32)).max()
    assert np.abs(out.numpy() - want_out).max() <= bound + 1e-6
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got.numpy(), want, rtol=2**-6, atol=2**-6 * np.abs(want).max())


def _to_numpy(emu, buf, shape, dtype):
    return emu.to_numpy(buf, shape, DType(dtype))


def test_swap_heads_moves_the_head_axis_and_converts(emu):
    rng = np.random.default_rng(3)
    b, d = 2, 5
    # (from, x, y, to): every pair of kinds, parts of different sizes.
    plan = [
        ("float32", 3, 4, "float32"),
        ("bfloat16", 6, 4, "bfloat16"),
        ("bfloat16", 2, 4, "float32"),
        ("float32", 3, 1, "bfloat16"),
        ("float32", 1, 7, "float32"),
        ("bfloat16", 4, 3, "float32"),
    ]
    arrays, parts = [], []
    for dtype, x, y, to in plan:
        a = rng.normal(0, 3, (b, x, y, d)).astype(np.float32)
        if dtype == "bfloat16":
            a = a.astype(BF16)
        a.reshape(-1)[0] = np.nan  # a NaN keeps its bits between storages of one kind
        arrays.append(a)
        parts.append((emu.from_numpy(a), dtype, x, y, to))
    emu.forget()
    outs = emu._swap_heads(b, d, parts)
    assert emu.kernel_names == {"swap_heads": 1}
    for a, out, (_, x, y, to) in zip(arrays, outs, plan):
        want = a.transpose(0, 2, 1, 3).astype(np.float32 if to == "float32" else BF16)
        got = _to_numpy(emu, out, (b, y, x, d), to)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_swap_heads_takes_at_most_six_parts(emu):
    x = emu.from_numpy(np.zeros((1, 2, 2, 2), np.float32))
    with pytest.raises(CudaError, match="one to six tensors a launch, given 7"):
        emu._swap_heads(1, 2, [(x, "float32", 2, 2, "float32")] * 7)


@pytest.mark.parametrize("causal", [True, False])
def test_the_fused_backward_row_pass_gives_the_two_kernels_bits(emu, causal):
    bh, t, s = 3, 5, 8
    rng = np.random.default_rng(7)
    scores = rng.normal(0, 2, (bh, t, s)).astype(np.float32)
    dp = rng.normal(0, 1, (bh, t, s)).astype(np.float32)
    scale, rows = 0.7, bh * t
    k = emu.kernels
    # The statistics, as the forward writes them.
    stats_in = emu.from_numpy(scores)
    row_max, row_sum = k.alloc((rows,), "float32"), k.alloc((rows,), "float32")
    k.rows(
        attention_ops._SOFTMAX,
        rows,
        [stats_in, row_max, row_sum, None, rows, t, s, scale, int(causal), 0],
    )
    # Two kernels, then one.
    p2, dp2 = emu.from_numpy(scores), emu.from_numpy(dp)
    k.rows(
        attention_ops._SOFTMAX,
        rows,
        [p2, row_max, row_sum, None, rows, t, s, scale, int(causal), 1],
    )
    k.rows(attention_ops._DSCORES, rows, [p2, dp2, rows, s, scale])
    p1, dp1 = emu.from_numpy(scores), emu.from_numpy(dp)
    k.rows(
        attention_ops._SOFTMAX_DSCORES,
        rows,
        [p1, dp1, row_max, row_sum, None, None, rows, t, s, scale, int(causal)],
    )
    for one, two in ((p1, p2), (dp1, dp2)):
        a = _to_numpy(emu, one, (bh, t, s), "float32")
        b = _to_numpy(emu, two, (bh, t, s), "float32")
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    probs = _to_numpy(emu, p1, (bh, t, s), "float32")
    assert (probs[:, ~_mask(t, s, causal)] == 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)

    # Computing in bfloat16: the same values rounded to bfloat16 into their own buffers
    # (forward and backward), the float32 scores and dp left as they were.
    def rounded(buf):
        return _to_numpy(emu, buf, (bh, t, s), "float32").astype(BF16).view(np.uint16)

    def low(buf):
        return _to_numpy(emu, buf, (bh, t, s), "bfloat16").view(np.uint16)

    s3, p16 = emu.from_numpy(scores), k.alloc((bh, t, s), "bfloat16")
    k.rows(
        attention_ops._SOFTMAX, rows, [s3, row_max, row_sum, p16, rows, t, s, scale, int(causal), 1]
    )
    np.testing.assert_array_equal(low(p16), rounded(p2))
    s4, dp4 = emu.from_numpy(scores), emu.from_numpy(dp)
    p16, ds16 = k.alloc((bh, t, s), "bfloat16"), k.alloc((bh, t, s), "bfloat16")
    k.rows(
        attention_ops._SOFTMAX_DSCORES,
        rows,
        [s4, dp4, row_max, row_sum, p16, ds16, rows, t, s, scale, int(causal)],
    )
    np.testing.assert_array_equal(low(p16), rounded(p1))
    np.testing.assert_array_equal(low(ds16), rounded(dp1))
    for kept, original in ((s3, scores), (s4, scores), (dp4, dp)):
        np.testing.assert_array_equal(_to_numpy(emu, kept, (bh, t, s), "float32"), original)
