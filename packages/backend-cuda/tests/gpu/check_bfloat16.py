"""bfloat16 on the cuda backend beyond riftco-tensor's shared suite (which checks the
contract against numpy formulas): each bfloat16 kernel gives the bits of the CPU
backend, or of its own float32 kernel on the widened inputs; every float32-only
capability refuses bfloat16 with a DTypeError, as the CPU does; and a tiny GPT-2
under mixed precision matches the CPU under mixed precision."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops.flash import tensor_cores
from riftco.tensor.plugin import FLOAT_UNARY
from riftco.testing import unavailable_reason

#: The backend checked: cuda, or cudaemu (the kernels on the host, see emulator/).
BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def backend():
    reason = unavailable_reason(BACKEND)
    if reason is not None:
        pytest.skip(f"{BACKEND} is unavailable: {reason}")
    return rt.get_backend(BACKEND)


def rand(shape, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def pair(x: np.ndarray, backend) -> tuple[rt.Tensor, rt.Tensor]:
    """The bfloat16 array ``x`` on the backend and on the CPU."""
    return rt.from_numpy(x, backend=backend), rt.from_numpy(x)


def same_bits(got: rt.Tensor, want: rt.Tensor) -> None:
    assert got.dtype is want.dtype and got.shape == want.shape
    a, b = got.numpy(), want.numpy()
    width = np.uint16 if a.dtype == BF16 else np.uint8 if a.dtype == np.bool_ else np.uint32
    np.testing.assert_array_equal(a.view(width), b.view(width))


def test_the_backend_declares_bfloat16_and_api_1_5_or_later(backend):
    assert backend.api_version >= (1, 5)
    assert backend.dtypes == rt.BASE_DTYPES | {rt.bfloat16}


def test_casts_of_every_nan_payload_give_the_quiet_nan_of_its_sign(backend):
    rng = np.random.default_rng(3)
    mantissa = rng.integers(1, 1 << 23, 2000, dtype=np.uint64).astype(np.uint32)
    sign = rng.integers(0, 2, 2000, dtype=np.uint64).astype(np.uint32) << 31
    nans = (sign | 0x7F800000 | mantissa).view(np.float32)
    got = rt.from_numpy(nans, backend=backend).astype("bfloat16").numpy().view(np.uint16)
    np.testing.assert_array_equal(got, np.where(sign != 0, 0xFFC0, 0x7FC0).astype(np.uint16))


#: Every float unary op of riftco.tensor's vocabulary.
UNARY = sorted(FLOAT_UNARY)


def unary(x: rt.Tensor, op: str) -> rt.Tensor:
    return rt.gelu(x, approximate="tanh") if op == "gelu_tanh" else getattr(x, op)()


@pytest.mark.parametrize("op", UNARY)
def test_unary_is_the_float32_kernel_rounded_once(backend, op):
    low = 0.01 if op in ("log", "sqrt", "rsqrt") else -6.0
    x = np.random.default_rng(4).uniform(low, 6.0, 513).astype(np.float32).astype(BF16)
    got, cpu = pair(x, backend)
    # Bit for bit the backend's own float32 function of the widened value, rounded;
    # the float32 functions of two backends may differ in their last bits (GELU's
    # tails: the CPU's erf is within 1.5e-7 absolute), so the CPU's rounded result is
    # a bfloat16 step away at most.
    same_bits(unary(got, op), unary(got.astype("float32"), op).astype("bfloat16"))
    np.testing.assert_allclose(
        unary(got, op).numpy().astype(np.float32),
        unary(cpu, op).numpy().astype(np.float32),
        rtol=2**-7,
        atol=1e-6,
    )


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
def test_binary_broadcasts_and_gives_the_cpu_bits(backend, op):
    a = rand((4, 1, 9), 6)
    a = (np.abs(a) if op == "pow" else a).astype(BF16)
    b = rand((3, 1), 7).astype(BF16)
    a[0, 0, :3] = np.array([np.nan, np.inf, -0.0], np.float32).astype(BF16)
    (ga, wa), (gb, wb) = pair(a, backend), pair(b, backend)
    same_bits(getattr(rt, op)(ga, gb), getattr(rt, op)(wa, wb))


def test_comparisons_and_where_give_the_cpu_bits(backend):
    a = rand((5, 6), 8).astype(BF16)
    b = rand((6,), 9).astype(BF16)
    a[0, :2] = np.array([np.nan, 1.0], np.float32).astype(BF16)
    b[1] = a[0, 1]
    (ga, wa), (gb, wb) = pair(a, backend), pair(b, backend)
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        same_bits(getattr(rt, op)(ga, gb), getattr(rt, op)(wa, wb))
    same_bits(rt.where(ga > gb, ga, gb), rt.where(wa > wb, wa, wb))


def test_layout_and_indexing_move_the_bits(backend):
    x = rand((3, 4, 5), 10).astype(BF16)
    got, want = pair(x, backend)
    same_bits(got.permute(2, 0, 1), want.permute(2, 0, 1))
    same_bits(got[1:, ::2, 3], want[1:, ::2, 3])
    same_bits(rt.broadcast_to(got[:, :1], (3, 4, 5)), rt.broadcast_to(want[:, :1], (3, 4, 5)))
    same_bits(rt.concatenate([got, got], 1), rt.concatenate([want, want], 1))
    idx = np.array([[[2, 0, 1, 1, 0]]] * 3)
    same_bits(
        rt.gather(got, 1, rt.tensor(idx, backend=backend)), rt.gather(want, 1, rt.tensor(idx))
    )
    same_bits(got.astype("float32"), want.astype("float32"))


def test_matmul_is_float32_and_matches_the_cpu(backend):
    a, b = rand((2, 33, 70), 11).astype(BF16), rand((70, 17), 12).astype(BF16)
    (ga, wa), (gb, wb) = pair(a, backend), pair(b, backend)
    got, want = rt.matmul(ga, gb), rt.matmul(wa, wb)
    assert got.dtype is rt.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["flash", "materialized"])
@pytest.mark.parametrize("causal", [True, False])
def test_bfloat16_attention_is_the_float32_kernel_on_widened_inputs(backend, method, causal):
    # Grouped-query heads and a window, with more keys than a tile of threads holds.
    q, k, v = rand((2, 19, 4, 8), 13), rand((2, 23, 2, 8), 14), rand((2, 23, 2, 8), 15)
    low = [rt.from_numpy(x.astype(BF16), backend=backend) for x in (q, k, v)]
    wide = [t.astype("float32") for t in low]
    kw = dict(method=method, causal=causal, window=7 if causal else 0)
    out, stats = rt.attention_with_stats(*low, **kw)
    want, want_stats = rt.attention_with_stats(*wide, **kw)
    same_bits(out, want)
    for s, w in zip(stats, want_stats):
        same_bits(s, w)
    grad = rt.from_numpy(rand((2, 19, 4, 8), 16), backend=backend)
    for g, w in zip(
        rt.attention_backward(grad, *low, out, stats, **kw),
        rt.attention_backward(grad, *wide, want, want_stats, **kw),
    ):
        same_bits(g, w)


@pytest.mark.parametrize("method", ["flash", "materialized"])
@pytest.mark.parametrize("causal", [True, False])
def test_bfloat16_attention_on_cublas_is_the_float32_route_on_widened_inputs(
    backend, method, causal
):
    # One key/value head per query head, no window: the cuBLAS route. Its bfloat16
    # scores product has exact products and float32 sums, as the float32 one on the
    # widened inputs, in an order cuBLAS may choose per dtype: equal to rounding.
    q, k, v = rand((2, 19, 3, 8), 23), rand((2, 23, 3, 8), 24), rand((2, 23, 3, 8), 25)
    low = [rt.from_numpy(x.astype(BF16), backend=backend) for x in (q, k, v)]
    wide = [t.astype("float32") for t in low]
    kw = dict(method=method, causal=causal)
    out, stats = rt.attention_with_stats(*low, **kw)
    want, want_stats = rt.attention_with_stats(*wide, **kw)
    close = dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), want.numpy(), **close)
    for s, w in zip(stats, want_stats):
        np.testing.assert_allclose(s.numpy(), w.numpy(), **close)
    grad = rt.from_numpy(rand((2, 19, 3, 8), 26), backend=backend)
    for g, w in zip(
        rt.attention_backward(grad, *low, out, stats, **kw),
        rt.attention_backward(grad, *wide, want, want_stats, **kw),
    ):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **close)


def refused_call(op: str, name: str) -> None:
    """``op`` of riftco-tensor on a bfloat16 operand on backend ``name``."""
    x = rt.from_numpy(rand((4, 8), 17), backend=name).astype("bfloat16")
    w = rt.ones(8, backend=name)
    ids = rt.tensor(np.array([1, 0, 3, 2]), backend=name)
    calls = {
        "sum": lambda: x.sum(),
        "max": lambda: x.max(axis=0),
        "argmax": lambda: rt.argmax(x, 1),
        "softmax": lambda: rt.softmax(x),
        "layer_norm": lambda: rt.layer_norm(x, w, w),
        "rms_norm": lambda: rt.rms_norm(x, w),
        "cross_entropy": lambda: rt.softmax_cross_entropy(x, ids),
        "index_add": lambda: rt.index_add(x, 0, ids, x),
        "nf4_linear": lambda: rt.nf4_linear(x, rt.nf4_quantize(rt.ones(8, 8, backend=name))),
    }
    calls[op]()


REFUSED = "sum max argmax softmax layer_norm rms_norm cross_entropy index_add nf4_linear".split()


@pytest.mark.parametrize("op", REFUSED)
def test_float32_only_capabilities_refuse_bfloat16_like_the_cpu(backend, op):
    for name in ("cpu", BACKEND):
        with pytest.raises(rt.DTypeError, match="expected float32"):
            refused_call(op, name)


def test_the_backend_methods_refuse_bfloat16_too(backend):
    # Below riftco-tensor's checks the kernels refuse a bfloat16 buffer with a
    # DTypeError (a CudaError too), never reading its bits as float32.
    from riftco.backends.cuda.errors import CudaError

    x = rt.from_numpy(rand((4, 8), 18).astype(BF16), backend=backend)
    f = rt.from_numpy(rand((4, 8), 19), backend=backend)
    calls = {
        "reduce": lambda: backend.reduce("sum", x._data, (4, 8), rt.bfloat16, 1),
        "softmax": lambda: backend.softmax(x._data, (4, 8), False, False),
        "layer_norm": lambda: backend.layer_norm(x._data, (4, 8), None, None, 1e-5),
        "rms_norm_backward": lambda: backend.rms_norm_backward(
            f._data, x._data, (4, 8), None, f._data
        ),
        "cross_entropy": lambda: backend.cross_entropy(x._data, (4, 8), None, -1),
        "adam_update": lambda: backend.adam_update(
            [x._data], [x._data], [[f._data]], [[f._data]], [32], 32,
            [1e-3], [0.9], [0.99], [1e-8], [0.0], True, [1], 1.0,
        ),
        "mixed attention": lambda: backend.flash_attention(
            x._data, f._data, x._data, (1, 4, 1, 8), (1, 4, 1, 8), 0.5, True, 0
        ),
    }  # fmt: skip
    for op, call in calls.items():
        with pytest.raises(rt.DTypeError) as caught:
            call()
            pytest.fail(f"{op} took bfloat16")
        assert isinstance(caught.value, CudaError), op


@pytest.mark.parametrize("heads", [4, 2], ids=["cublas-route", "flash-attention"])
def test_tiny_model_under_mixed_precision_matches_the_cpu(backend, heads):
    # 4 heads of 8: attention's cuBLAS route; 2 heads of 16: FlashAttention-2 (on a GPU
    # with bfloat16 mma.sync, and on the emulation).
    nn = pytest.importorskip("riftco.nn")
    config = nn.TransformerConfig.preset(
        "gpt2", vocab_size=64, context_length=16, d_model=32, n_heads=heads, n_layers=2, d_ff=64
    )
    tokens = np.random.default_rng(0).integers(0, 64, (3, 13))
    if heads == 2 and tensor_cores(backend.device.arch):  # the route the model takes here
        assert backend._flash_route(3, 12, 12, 2, 2, 16, True, 0)
    results = []
    for name in (BACKEND, "cpu"):
        model = nn.DecoderOnlyTransformer(config, seed=0, backend=name)
        with nn.mixed_precision("bf16"):
            loss = model.loss(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
        results.append((float(loss.value.item()), grads))
    (loss, grads), (cpu_loss, cpu_grads) = results
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, cpu_loss, rtol=1e-5)
    # The cuda backend takes attention's compute permission (riftco-tensor API 1.12): its
    # products read the probabilities and the gradients as bfloat16 roundings, which the
    # cpu's float32 products do not, so each gradient is within bfloat16's rounding of
    # its scale of the cpu's rather than float32 summation's.
    for name, g in grads.items():
        assert g.dtype == np.float32, name
        scale = float(np.abs(cpu_grads[name]).max())
        np.testing.assert_allclose(
            g, cpu_grads[name], rtol=2e-3, atol=max(2e-5, 2**-8 * scale), err_msg=name
        )


@pytest.mark.parametrize("t, s, causal", [(200, 200, True), (130, 260, True), (96, 150, False)])
def test_flash_attention_on_the_tensor_cores_matches_float64(backend, t, s, causal):
    # FlashAttention-2 (bfloat16 compute, one key/value head per query head, head
    # dimension 64): against the float64 formula on the same bfloat16 inputs, within
    # bfloat16's rounding of the probabilities and gradients; on a GPU this is the
    # mma.sync fragment table against the hardware.
    if not tensor_cores(backend.device.arch):
        pytest.skip(f"{backend.device.arch} has no bfloat16 mma.sync")
    b, h, dh = 2, 2, 64
    assert backend._flash_route(b, t, s, h, h, dh, causal, 0)
    rng = np.random.default_rng(t + s)
    q, k, v = (rng.standard_normal((b, n, h, dh)).astype(BF16) for n in (t, s, s))
    dout = rng.standard_normal((b, t, h, dh)).astype(np.float32)
    tq, tk, tv = (rt.from_numpy(x, backend=backend) for x in (q, k, v))
    kw = dict(causal=causal, compute="bfloat16")
    out, stats = rt.attention_with_stats(tq, tk, tv, **kw)
    grads = rt.attention_backward(
        rt.from_numpy(dout, backend=backend), tq, tk, tv, out, stats, **kw
    )

    qh, kh, vh, gh = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v, dout))
    scale = 1 / np.sqrt(dh)
    seen = (
        np.arange(s)[None, :] <= np.arange(t)[:, None] + s - t if causal else np.ones((t, s), bool)
    )
    scores = np.where(seen, scale * qh @ kh.swapaxes(-1, -2), -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = gh @ vh.swapaxes(-1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    want = [p @ vh, scale * ds @ kh, scale * ds.swapaxes(-1, -2) @ qh, p.swapaxes(-1, -2) @ gh]
    got = [out, *grads]
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        w = w.transpose(0, 2, 1, 3)
        np.testing.assert_allclose(
            g.numpy(), w, rtol=2**-6, atol=2**-6 * np.abs(w).max(), err_msg=name
        )
