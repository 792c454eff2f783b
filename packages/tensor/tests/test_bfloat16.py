"""bfloat16 tensors against numpy formulas over ml_dtypes: casts (nearest, ties to even,
special values), layout moves, elementwise ops computed in float32, matrix products and
attention with float32 accumulation; and a backend without bfloat16 refusing it."""

import ml_dtypes
import numpy as np
import pytest
from tensor_helpers import on, rand

import riftco.tensor as rt
from riftco.testing.tensor import NumpyReferenceBackend

BF16 = np.dtype(ml_dtypes.bfloat16)


def needs_bf16(backend) -> None:
    """Skip a backend that holds no bfloat16, once it has refused one clearly."""
    if rt.bfloat16 in backend.dtypes:
        return
    with pytest.raises(rt.DTypeError, match="does not hold bfloat16"):
        on(backend, np.ones(2, np.float32), dtype="bfloat16")
    pytest.skip(f"backend {backend.name!r} holds no bfloat16 tensors")


def bits(x) -> np.ndarray:
    array = x.numpy() if isinstance(x, rt.Tensor) else np.asarray(x)
    assert array.dtype == BF16, array.dtype
    return array.view(np.uint16)


def f32_bits(*patterns: int) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


# Ties (the dropped half exactly 0x8000) with even and odd kept halves, neighbours of
# ties, the largest finite float32 (rounds to infinity), subnormals, signed zeros,
# infinities, quiet and signalling NaNs of both signs, and a payload in the dropped half.
SPECIAL = f32_bits(
    0x3F808000,
    0x3F818000,
    0x3F807FFF,
    0x3F808001,
    0xBF818000,
    0x7F7FFFFF,
    0x7F7F7FFF,
    0x7F7F8000,
    0x00000001,
    0x00008000,
    0x00018000,
    0x807FFFFF,
    0x00000000,
    0x80000000,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    0xFFC00000,
    0x7F800001,
    0xFF812345,
    0x7FBFFFFF,
)


def cast_inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    patterns = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([SPECIAL, patterns.view(np.float32), rand((500,), 3)])


def test_float32_to_bfloat16_rounds_like_ml_dtypes(backend):
    needs_bf16(backend)
    x = cast_inputs()
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).view(np.uint16)
        low = x.astype(BF16)
    got = on(backend, x).astype("bfloat16")
    assert got.dtype is rt.bfloat16 and got.shape == x.shape
    np.testing.assert_array_equal(bits(got), want)
    # from_numpy rounds the same way, and an ml_dtypes array keeps its bits.
    np.testing.assert_array_equal(bits(on(backend, x, dtype="bfloat16")), want)
    np.testing.assert_array_equal(bits(rt.from_numpy(low, backend=backend)), want)


def test_rounding_rules_by_hand(backend):
    needs_bf16(backend)
    got = bits(on(backend, SPECIAL[:8]).astype(rt.bfloat16))
    # ties to even (down, up, down for a negative odd), then nearest, then overflow.
    assert got.tolist() == [0x3F80, 0x3F82, 0x3F80, 0x3F81, 0xBF82, 0x7F80, 0x7F7F, 0x7F80]
    nans = bits(on(backend, f32_bits(0x7FC00000, 0xFFC00000, 0x7F800001)).astype("bfloat16"))
    assert nans.tolist() == [0x7FC0, 0xFFC0, 0x7FC0]


def test_bfloat16_to_float32_is_exact(backend):
    needs_bf16(backend)
    every = np.arange(2**16, dtype=np.uint16)
    got = on(backend, every.view(BF16)).astype("float32").numpy()
    assert got.dtype == np.float32
    expected = (every.astype(np.uint32) << 16).view(np.float32)
    nan = np.isnan(expected)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_numpy_round_trip_and_other_casts(backend):
    needs_bf16(backend)
    x = np.array([[1.5, -2.75, 3e-3], [65504.0, -0.0, 7.0]], np.float32).astype(BF16)
    t = rt.from_numpy(x, backend=backend)
    assert t.dtype is rt.bfloat16 and rt.as_dtype(BF16) is rt.bfloat16
    assert rt.as_dtype("bfloat16") is rt.bfloat16 and rt.bfloat16.is_floating
    out = t.numpy()
    assert out.dtype == BF16
    np.testing.assert_array_equal(out.view(np.uint16), x.view(np.uint16))
    assert t.tolist()[0][:2] == [1.5, -2.75] and isinstance(t.reshape(-1)[0].item(), float)
    # Other dtypes go through float32: ints truncate toward zero, bools are x != 0.
    np.testing.assert_array_equal(t.astype("int64").numpy(), x.astype(np.float32).astype(np.int64))
    np.testing.assert_array_equal(t.astype("bool").numpy(), x.astype(np.float32) != 0)
    ints = np.array([3, -7, 257, 2**24 + 3], np.int64)
    want = ints.astype(np.float32).astype(BF16).view(np.uint16)
    np.testing.assert_array_equal(bits(on(backend, ints).astype("bfloat16")), want)


def test_layout_moves_keep_bits(backend):
    needs_bf16(backend)
    x = rand((2, 3, 4), 1).astype(BF16)
    t = rt.from_numpy(x, backend=backend)
    np.testing.assert_array_equal(
        bits(t.permute(2, 0, 1)), np.transpose(x, (2, 0, 1)).view(np.uint16)
    )
    np.testing.assert_array_equal(bits(t[:, 1:, ::2]), x[:, 1:, ::2].view(np.uint16))
    np.testing.assert_array_equal(bits(t.reshape(6, 4)), x.reshape(6, 4).view(np.uint16))
    cat = rt.concatenate([t, t.narrow(2, 0, 1)], axis=2)
    np.testing.assert_array_equal(bits(cat), np.concatenate([x, x[:, :, :1]], 2).view(np.uint16))
    idx = on(backend, np.array([2, 0, 2]))
    np.testing.assert_array_equal(bits(rt.index_select(t, 1, idx)), x[:, [2, 0, 2]].view(np.uint16))
    cond = on(backend, np.array([True, False, True, False]))
    np.testing.assert_array_equal(
        bits(rt.where(cond, t, t * 2.0)),
        np.where(cond.numpy(), x, x * BF16.type(2)).view(np.uint16),
    )


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_computes_in_float32_and_rounds_once(backend, op):
    needs_bf16(backend)
    a, b = rand((33, 17), 1).astype(BF16), rand((17,), 2).astype(BF16)
    fn = getattr(
        np, {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}.get(op, op)
    )
    want = fn(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    got = getattr(rt, op)(rt.from_numpy(a, backend=backend), rt.from_numpy(b, backend=backend))
    assert got.dtype is rt.bfloat16
    np.testing.assert_array_equal(bits(got), want.view(np.uint16))


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "gelu", "silu", "neg", "sqrt"])
def test_unary_is_within_one_bfloat16_step(backend, op):
    needs_bf16(backend)
    x = rand((257,), 4, low=0.01 if op == "sqrt" else -3.0, high=3.0).astype(BF16)
    want = getattr(on(backend, x.astype(np.float32)), op)().numpy()
    got = getattr(rt.from_numpy(x, backend=backend), op)()
    assert got.dtype is rt.bfloat16
    np.testing.assert_allclose(got.numpy().astype(np.float32), want, rtol=2**-8, atol=1e-30)


def test_comparisons_read_float32_values(backend):
    needs_bf16(backend)
    a = np.array([1.0, 2.0, np.nan, -1.0], np.float32).astype(BF16)
    b = np.array([1.0, 3.0, np.nan, -2.0], np.float32).astype(BF16)
    ta, tb = rt.from_numpy(a, backend=backend), rt.from_numpy(b, backend=backend)
    assert rt.eq(ta, tb).tolist() == [True, False, False, False]
    assert rt.lt(ta, tb).tolist() == [False, True, False, False]
    assert (ta >= tb).tolist() == [True, False, False, True]


MATMUL_CASES = [
    ((3, 4), (4, 5), False, False),
    ((65, 130), (97, 130), False, True),
    ((130, 65), (130, 97), True, False),
    ((2, 3, 4), (4, 5), False, False),
    ((2, 1, 7, 16), (3, 5, 16), False, True),
    ((1, 300), (300, 70), False, False),
    ((0, 4), (4, 3), False, False),
]


@pytest.mark.parametrize(("sa", "sb", "ta", "tb"), MATMUL_CASES, ids=str)
def test_matmul_accumulates_in_float32(backend, sa, sb, ta, tb):
    needs_bf16(backend)
    a, b = rand(sa, 1).astype(BF16), rand(sb, 2).astype(BF16)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = (np.swapaxes(x, -1, -2) if ta else x) @ (np.swapaxes(y, -1, -2) if tb else y)
    got = rt.matmul(
        rt.from_numpy(a, backend=backend),
        rt.from_numpy(b, backend=backend),
        transpose_a=ta,
        transpose_b=tb,
    )
    assert got.dtype is rt.float32 and got.shape == want.shape
    # Exact products, float32 sums: float32's error, not bfloat16's (2^-8).
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_matmul_sums_past_bfloat16_resolution(backend):
    needs_bf16(backend)
    # 4097 ones: a bfloat16 accumulator would stop at 256; products of small
    # integers are exact, so float32 accumulation gives exactly the integer.
    a = rt.ones(1, 4097, backend=backend).astype("bfloat16")
    assert rt.matmul(a, a, transpose_b=True).item() == 4097.0
    ints = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    t = on(backend, ints).astype("bfloat16")
    np.testing.assert_array_equal(rt.matmul(t, t, transpose_b=True).numpy(), ints @ ints.T)


def test_matmul_refuses_mixed_dtypes(backend):
    needs_bf16(backend)
    a = on(backend, rand((2, 3)))
    with pytest.raises(rt.DTypeError, match="matmul: expected bfloat16, found float32"):
        rt.matmul(a.astype("bfloat16"), a, transpose_b=True)
    with pytest.raises(rt.DTypeError, match="matmul: expected float32 or bfloat16, found int64"):
        rt.matmul(on(backend, np.ones((2, 2), np.int64)), a.astype("bfloat16"))


@pytest.mark.parametrize("method", ["flash", "materialized"])
def test_attention_reads_bfloat16_and_keeps_float32(backend, method):
    needs_bf16(backend)
    shape_q, shape_kv = (2, 5, 4, 8), (2, 5, 2, 8)
    q, k, v = (
        rand(s, seed).astype(BF16) for s, seed in ((shape_q, 1), (shape_kv, 2), (shape_kv, 3))
    )
    wide = [on(backend, x.astype(np.float32)) for x in (q, k, v)]
    low = [rt.from_numpy(x, backend=backend) for x in (q, k, v)]
    out, stats = rt.attention_with_stats(*low, method=method)
    want, want_stats = rt.attention_with_stats(*wide, method=method)
    assert out.dtype is rt.float32 and all(s.dtype is rt.float32 for s in stats)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    grad = on(backend, rand(shape_q, 4))
    got_grads = rt.attention_backward(grad, *low, out, stats, method=method)
    want_grads = rt.attention_backward(grad, *wide, want, want_stats, method=method)
    for g, w in zip(got_grads, want_grads):
        assert g.dtype is rt.float32
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(rt.DTypeError, match="expected bfloat16, found float32"):
        rt.attention(low[0], wide[1], low[2])


def test_attention_compute_is_a_permission_within_its_bound(backend):
    # compute="bfloat16" (API 1.12): a backend with the kernels may multiply the
    # probabilities, the output gradient and the scores' gradient as their bfloat16
    # roundings (within the stated bound of the float32 products); one without them
    # gives the float32 products' bits.
    needs_bf16(backend)
    shape = (2, 16, 4, 8)
    q, k, v = (rand(shape, seed).astype(BF16) for seed in (1, 2, 3))
    low = [rt.from_numpy(x, backend=backend) for x in (q, k, v)]
    plain, plain_stats = rt.attention_with_stats(*low)
    out, stats = rt.attention_with_stats(*low, compute="bfloat16")
    grad = on(backend, rand(shape, 4))
    want_grads = rt.attention_backward(grad, *low, plain, plain_stats)
    grads = rt.attention_backward(grad, *low, out, stats, compute="bfloat16")
    own = backend.capabilities()
    if "flash_attention_compute" not in own:
        np.testing.assert_array_equal(out.numpy(), plain.numpy())
    bound = 2.0**-8 * float(np.abs(v.astype(np.float32)).max())
    assert out.dtype is rt.float32
    assert np.abs(out.numpy() - plain.numpy()).max() <= bound + 1e-6  # + float32 sums
    for g, w in zip(grads, want_grads):
        w = w.numpy()
        assert g.dtype is rt.float32
        if "flash_attention_backward_compute" not in own:
            np.testing.assert_array_equal(g.numpy(), w)
        np.testing.assert_allclose(g.numpy(), w, rtol=2**-6, atol=2**-6 * np.abs(w).max())
    with pytest.raises(rt.DTypeError, match="compute dtype is float32 or bfloat16"):
        rt.attention(*low, compute="int64")


def test_cpu_kernels_widen_exactly():
    # On the CPU, bfloat16 attention and products are the float32 kernels on the
    # widened values, bit for bit.
    q = rand((1, 6, 2, 4), 5).astype(BF16)
    low, wide = rt.from_numpy(q), rt.tensor(q.astype(np.float32))
    np.testing.assert_array_equal(
        rt.attention(low, low, low).numpy(), rt.attention(wide, wide, wide).numpy()
    )
    m = low.reshape(6, 8)
    np.testing.assert_array_equal(
        rt.matmul(m, m, transpose_b=True).numpy(),
        rt.matmul(wide.reshape(6, 8), wide.reshape(6, 8), transpose_b=True).numpy(),
    )


class Float32Only(NumpyReferenceBackend):
    name = "float32-only"
    dtypes = rt.BASE_DTYPES


def test_a_backend_without_bfloat16_refuses_it():
    plain = Float32Only()
    assert rt.bfloat16 not in plain.dtypes and rt.bfloat16 in rt.get_backend("cpu").dtypes
    with pytest.raises(
        rt.DTypeError, match="from_numpy: backend 'float32-only' does not hold bfloat16"
    ):
        rt.from_numpy(np.ones(3, BF16), backend=plain)
    x = rt.ones(3, backend=plain)
    with pytest.raises(rt.DTypeError, match="astype: .*holds float32, int64, bool, uint8"):
        x.astype("bfloat16")
    with pytest.raises(rt.DTypeError, match="to: backend 'float32-only'"):
        rt.ones(3).astype("bfloat16").to(plain)
