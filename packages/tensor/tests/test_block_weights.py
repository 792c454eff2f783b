"""Weights in llama.cpp's block layouts (Q8_0, Q4_0, F16): the bytes pinned against
ggml's reference quantizers (rounding, ties, nibble order, half scales), and the
capabilities block_dequantize and block_linear on every backend against the numpy
definition."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.ops.blockquant import (
    BlockWeight,
    block_linear_reference,
    dequantize_block_array,
    quantize_activation_rows,
    quantize_block_array,
)

FORMATS = ("q8_0", "q4_0", "f16")


def half_bytes(v: float) -> list[int]:
    return list(np.array([v], "<f2").view(np.uint8))


def weight(rows=40, cols=96, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * rng.uniform(0.05, 2, (rows, 1))).astype(np.float32)


def test_q8_0_block_bytes_follow_the_reference_quantizer():
    x = np.arange(32, dtype=np.float32) - 16  # max |x| = 16: d = 16 / 127
    x[1] = 0.5 * 16 / 127  # exactly half a step: rounds away from zero
    x[2] = -0.5 * 16 / 127
    raw = quantize_block_array(x.reshape(1, 32), "q8_0")
    d = np.float32(16) / np.float32(127)
    assert raw.size == 34
    assert list(raw[:2]) == half_bytes(d)
    q = raw[2:].view(np.int8)
    assert q[0] == -127 and q[31] == np.rint(15 * np.float32(1) / d)
    assert q[16] == 0 and q[1] == 1 and q[2] == -1
    # An all-zero block: scale 0, codes 0.
    assert not quantize_block_array(np.zeros((1, 32), np.float32), "q8_0").any()


def test_q4_0_block_bytes_follow_the_reference_quantizer():
    x = np.zeros(32, np.float32)
    x[20] = -4.0  # the first value of largest magnitude sets d = m / -8 = 0.5
    x[21] = 4.0
    x[3], x[4] = 1.0, 0.25
    raw = quantize_block_array(x.reshape(1, 32), "q4_0")
    assert raw.size == 18 and list(raw[:2]) == half_bytes(0.5)
    # element j in the low nibble of byte j, element 16 + j in its high nibble
    q = np.concatenate([raw[2:] & 15, raw[2:] >> 4]).astype(int)
    # trunc(x * 2 + 8.5), at most 15: -4 -> 0, 4 -> 16.5 -> 15, 1 -> 10, 0.25 -> 9, 0 -> 8
    assert (q[20], q[21], q[3], q[4], q[0]) == (0, 15, 10, 9, 8)
    back = dequantize_block_array(raw, "q4_0", (1, 32))[0]
    assert np.array_equal(back[[20, 21, 3, 4, 0]], [-4.0, 3.5, 1.0, 0.5, 0.0])
    # An all-zero block stores d = -0 and every code 8.
    z = quantize_block_array(np.zeros((1, 32), np.float32), "q4_0")
    assert list(z[:2]) == [0, 0x80] and (z[2:] == 0x88).all()


def test_f16_rounds_to_nearest_and_refuses_what_overflows():
    x = weight(3, 5)
    raw = quantize_block_array(x, "f16")
    assert np.array_equal(raw.view("<f2").reshape(3, 5), x.astype(np.float16))
    with pytest.raises(ValueError, match="half range"):
        quantize_block_array(np.full((1, 2), 7e4, np.float32), "f16")


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_error_is_bounded(fmt):
    w = weight()
    back = dequantize_block_array(quantize_block_array(w, fmt), fmt, w.shape)
    amax = np.abs(w.reshape(-1, 32)).max(axis=1).repeat(32).reshape(w.shape)
    # half a step, plus the scale rounded to half (2^-11 of it) on up to 127 or 8 steps
    bound = {"q8_0": amax * (1 / 254 + 1 / 2000), "q4_0": amax * (1 / 8 + 1 / 2000)}
    if fmt == "f16":
        assert np.allclose(back, w, rtol=2**-11, atol=1e-7)
    else:
        assert (np.abs(back - w) <= bound[fmt]).all()


def test_bad_input_is_refused():
    with pytest.raises(rt.ShapeError, match="whole blocks of 32"):
        quantize_block_array(np.zeros((2, 48), np.float32), "q8_0")
    with pytest.raises(ValueError, match="non-finite"):
        quantize_block_array(np.full((1, 32), np.nan, np.float32), "q4_0")
    with pytest.raises(ValueError, match="format must be one of"):
        quantize_block_array(np.zeros((1, 32), np.float32), "q5_0")
    w = rt.block_quantize(np.zeros((2, 32), np.float32), "q8_0")
    with pytest.raises(rt.ShapeError, match="must be uint8"):
        BlockWeight("q8_0", (3, 32), w.data)
    with pytest.raises(rt.ShapeError, match=r"expected \[..., 32\]"):
        rt.block_linear(rt.zeros((1, 31)), w)
    with pytest.raises(rt.ShapeError, match="bias must be"):
        rt.block_linear(rt.zeros((1, 32)), w, rt.zeros((3,)))


def test_activation_rows_quantize_like_the_weights():
    x = weight(3, 64, seed=4)
    q, s = quantize_activation_rows(x)
    raw = quantize_block_array(x, "q8_0").reshape(3, 2, 34)
    # Away from ties the codes of ggml's x86 and reference quantizers agree, and the
    # activation scale is the half the weight's block stores.
    assert np.array_equal(q.reshape(3, 2, 32), raw[..., 2:].view(np.int8))
    assert np.array_equal(s, raw[..., :2].copy().view("<f2")[..., 0].astype(np.float32))


def test_activation_rows_follow_ggml_x86_quantize_row_q8_0():
    x = np.zeros((1, 64), np.float32)
    x[0, 0] = 100.0  # scale half(100 / 127), codes from 127 / 100 in float32
    x[0, 1] = np.float32(0.5) * np.float32(100) / np.float32(127)  # close to a tie
    x[0, 2:6] = [-37.3, 23.5 * 100 / 127, 0.3, -0.9]
    x[0, 32] = 127.0  # scale 1: the codes are x rounded, ties to even
    x[0, 33:38] = [0.5, 1.5, 2.5, -0.5, -3.5]
    q, s = quantize_activation_rows(x)
    assert s.dtype == np.float32
    assert s[0, 0] == np.float32(np.float16(np.float32(100) / np.float32(127)))
    assert s[0, 0] != np.float32(100) / np.float32(127)  # not the float32 scale
    assert s[0, 1] == 1.0
    inv = np.float32(127) / np.float32(100)
    assert list(q[0, :6]) == [127, *np.rint(x[0, 1:6] * inv).astype(int)]
    assert list(q[0, 32:38]) == [127, 0, 2, 2, 0, -4]
    # All zero: scale 0, codes 0; past the half range the scale is infinite.
    zero_q, zero_s = quantize_activation_rows(np.zeros((2, 32), np.float32))
    assert not zero_q.any() and not zero_s.any()
    assert np.isinf(quantize_activation_rows(np.full((1, 32), 9e6, np.float32))[1]).all()


def test_the_kernels_use_half_activation_scales():
    """The CPU's linear equals the reference with half scales, and differs from the
    same sum with float32 activation scales (what riftco computed before)."""
    w = weight(8, 256, seed=5)
    x = weight(3, 256, seed=6) * np.float32(3.3)
    raw = quantize_block_array(w, "q8_0")
    y = rt.block_linear(rt.tensor(x), BlockWeight.from_bytes(raw, "q8_0", w.shape)).numpy()
    want = block_linear_reference(x, raw, "q8_0", w.shape)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
    q, _ = quantize_activation_rows(x)
    blocks = np.abs(x.reshape(3, -1, 32)).max(axis=2)
    f32_scales = (blocks / np.float32(127)).astype(np.float64)
    wd = dequantize_block_array(raw, "q8_0", w.shape).astype(np.float64)
    xq = q.astype(np.float64).reshape(3, -1, 32)
    old = (xq * f32_scales[..., None]).reshape(3, -1) @ wd.T
    assert np.abs(old - want).max() > 100 * np.abs(y - want).max()


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_the_composed_linear_quantizes_activations_as_the_kernels_do(fmt):
    from riftco.tensor.ops.blockquant_composed import ComposedBlockOps

    cpu = rt.get_backend("cpu")
    w = weight(24, 128, seed=7)
    x = weight(5, 128, seed=8)
    x[0, :32] = np.float32(1.0 / 3.0) * np.arange(32)  # ties and near-ties
    x[1, :32] = 1e-7  # a subnormal half scale
    x[2, 32:64] = 6e5  # a large one
    raw = quantize_block_array(w, fmt)
    data = rt.tensor(raw)._data
    composed = ComposedBlockOps(cpu).block_linear(
        rt.tensor(x)._data, x.shape, data, fmt, w.shape, None
    )
    got = np.asarray(rt.Tensor._wrap(composed, (5, 24), rt.float32, cpu).numpy())
    want = block_linear_reference(x, raw, fmt, w.shape)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)
    ours = rt.block_linear(rt.tensor(x), BlockWeight.from_bytes(raw, fmt, w.shape)).numpy()
    np.testing.assert_allclose(got, ours, rtol=2e-6, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_and_linear_on_every_backend(backend, fmt):
    w = weight(70, 128, seed=1)
    raw = quantize_block_array(w, fmt)
    packed = BlockWeight.from_bytes(raw, fmt, w.shape, backend=backend)
    assert packed.nbytes == raw.size
    assert np.array_equal(
        rt.block_dequantize(packed).numpy(), dequantize_block_array(raw, fmt, w.shape)
    )
    x = weight(6, 128, seed=2).reshape(2, 3, 128)
    bias = rt.tensor(np.linspace(-1, 1, 70, dtype=np.float32), backend=backend)
    y = rt.block_linear(rt.tensor(x, backend=backend), packed, bias).numpy()
    want = block_linear_reference(x.reshape(6, 128), raw, fmt, w.shape).reshape(2, 3, 70)
    want = want + np.linspace(-1, 1, 70, dtype=np.float32)
    assert y.shape == (2, 3, 70)
    assert np.allclose(y, want, rtol=1e-5, atol=1e-5)
    # One row at a time (decode) gives the same bits as the batch (prefill) on the cpu
    # (its kernels promise it; other backends agree to rounding).
    for i in range(2):
        row = rt.block_linear(rt.tensor(x[i, :1], backend=backend), packed, bias).numpy()
        if backend.name == "cpu":
            assert np.array_equal(row[0], y[i, 0])
        else:
            assert np.allclose(row[0], y[i, 0], rtol=1e-5, atol=1e-5)
    # Against float32: the 8-bit activations cost about 1/254 of each product.
    exact = x @ dequantize_block_array(raw, fmt, w.shape).T
    scale = np.abs(x) @ np.abs(dequantize_block_array(raw, fmt, w.shape)).T
    tol = 1e-5 * scale if fmt == "f16" else scale / 250
    assert (np.abs(y - (exact + np.linspace(-1, 1, 70))) <= tol + 1e-5).all()


def test_identity_hashes_format_shape_and_bytes():
    w = weight(4, 32)
    a = rt.block_quantize(w, "q8_0")
    b = rt.block_quantize(w, "q8_0")
    assert a.identity == b.identity
    assert rt.block_quantize(w, "q4_0").identity != a.identity
    w[0, 0] += 1
    assert rt.block_quantize(w, "q8_0").identity != a.identity
    assert a.bits_per_weight == 8.5 and rt.block_quantize(w, "q4_0").bits_per_weight == 4.5
