"""NF4 quantized weights: the packed format pinned byte by byte (codebook, ties,
nibble order, double-quantized scales), dequantization error bounds, and the
capabilities nf4_dequantize, nf4_linear and nf4_linear_backward on every backend
against the numpy formula."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor.ops.quantized import (
    NF4_CODEBOOK,
    NF4_SCALE_GROUP,
    NF4Weight,
    decode_nf4_scales,
    dequantize_nf4_array,
    quantize_nf4_array,
)

REFERENCE_CODES = [
    "-1",
    "-0.6961928009986877",
    "-0.5250730514526367",
    "-0.39491748809814453",
    "-0.28444138169288635",
    "-0.18477343022823334",
    "-0.09105003625154495",
    "0",
    "0.07958029955625534",
    "0.16093020141124725",
    "0.24611230194568634",
    "0.33791524171829224",
    "0.44070982933044434",
    "0.5626170039176941",
    "0.7229568362236023",
    "1",
]
C = NF4_CODEBOOK


def codes_of(weight, block_size=32):
    """Code indices, in element order, of a plain (not double-quantized) packing."""
    packed = quantize_nf4_array(np.asarray(weight, np.float32), block_size, double_quant=False)
    index = np.empty(packed["codes"].size * 2, np.uint8)
    index[0::2], index[1::2] = packed["codes"] & 15, packed["codes"] >> 4
    return index[: np.asarray(weight).size].tolist(), packed


def block_with(values, block_size=32):
    """One block: ``values`` then zeros."""
    row = np.zeros(block_size, np.float32)
    row[: len(values)] = values
    return row


# -- the format ---------------------------------------------------------------------
def test_codebook_is_the_published_table():
    assert NF4_CODEBOOK.tolist() == [float(np.float32(v)) for v in REFERENCE_CODES]
    assert np.all(np.diff(NF4_CODEBOOK) > 0)
    assert not NF4_CODEBOOK.flags.writeable


def test_nearest_code_and_nibble_order():
    w = block_with([1.0, -1.0, 0.0, 0.5, -0.3, 0.7])
    index, packed = codes_of(w[None, :])
    assert index[:6] == [15, 0, 7, 12, 4, 14]
    assert index[6:] == [7] * 26
    # First value in the low nibble, second in the high one.
    assert packed["codes"][:3].tolist() == [0x0F, 0xC7, 0xE4]
    assert packed["absmax"].tolist() == [1.0]


def test_ties_go_to_the_lower_index():
    exact = []
    for i in range(15):
        mid = (float(C[i]) + float(C[i + 1])) / 2
        if float(np.float32(mid)) == mid:  # a float32 value can sit exactly on it
            exact.append((i, np.float32(mid)))
    assert len(exact) >= 4
    w = block_with([1.0] + [m for _, m in exact])
    index, _ = codes_of(w[None, :])
    assert index[1 : 1 + len(exact)] == [i for i, _ in exact]
    above = block_with([1.0] + [np.nextafter(m, np.float32(2)) for _, m in exact])
    index, _ = codes_of(above[None, :])
    assert index[1 : 1 + len(exact)] == [i + 1 for i, _ in exact]


def test_zero_block_odd_length_and_partial_last_block():
    w = np.concatenate([np.zeros(32, np.float32), [0.25, -2.0, 1.0]]).astype(np.float32)
    index, packed = codes_of(w[None, :])
    assert packed["absmax"].tolist() == [0.0, 2.0]  # an all-zero block has scale 0
    assert index[:32] == [7] * 32
    assert index[32:] == [9, 0, 12]  # 0.125 -> 0.1609, -1 -> -1, 0.5 -> 0.4407
    assert packed["codes"][16:].tolist() == [0x09, 0x0C]  # a high nibble of 0 pads
    back = dequantize_nf4_array(packed["codes"], packed["absmax"], None, 0.0, (1, 35), 32)
    assert back[0, :32].tolist() == [0.0] * 32
    assert back[0, 33] == -2.0


def test_plain_byte_layout():
    w = rt.nf4_quantize(np.array([[1.0, -1.0, 0.0, 0.5]], np.float32), 32, double_quant=False)
    assert w.to_bytes().hex() == "0fc7" + "0000803f"
    assert w.metadata() == {
        "format": "nf4",
        "shape": [1, 4],
        "block_size": 32,
        "double_quant": False,
    }
    assert w.nbytes == 6


def dq_weight():
    """Four blocks of 32 whose scales are 327, 200.5, 199.5 and 73 (mean 200)."""
    rows = [block_with([s, -s / 2]) for s in (327.0, 200.5, 199.5, 73.0)]
    return np.stack(rows).reshape(2, 64)


def test_double_quantized_scales_round_half_away_from_zero():
    packed = quantize_nf4_array(dq_weight(), 32)
    assert packed["offset"].tolist() == [200.0]
    assert packed["group_range"].tolist() == [127.0]
    # 127 (s - m) / t = 127, 0.5, -0.5, -127: halves round away from zero.
    assert packed["absmax"].tolist() == [255, 129, 127, 1]
    scales = decode_nf4_scales(packed["absmax"], packed["group_range"], 200.0)
    assert scales.tolist() == [327.0, 201.0, 199.0, 73.0]


def test_double_quantized_byte_layout():
    w = rt.nf4_quantize(dq_weight(), 32)
    codes = "2f" + "77" * 15  # 1 -> 15 (low nibble), -1/2 -> 2 (-0.525), zeros -> 7
    expected = codes * 4 + "ff817f01" + "0000fe42" + "00004843"  # q, t = 127.0, m = 200.0
    assert w.to_bytes().hex() == expected
    assert w.metadata()["double_quant"] is True
    assert w.nbytes == 64 + 4 + 4 + 4
    again = NF4Weight.from_arrays(w.arrays(), w.shape, 32)
    assert again.identity == w.identity and again.to_bytes() == w.to_bytes()


def test_zero_range_stores_128_and_groups_of_256():
    same = np.ones((4, 64), np.float32)
    packed = quantize_nf4_array(same, 32)
    assert packed["absmax"].tolist() == [128] * 8 and packed["group_range"].tolist() == [0.0]
    assert decode_nf4_scales(packed["absmax"], packed["group_range"], 1.0).tolist() == [1.0] * 8
    # 300 blocks: the first 256 scales are 1 or 3, the last 44 are 1 or 11.
    scales = np.where(np.arange(300) % 2 == 0, 1.0, 3.0).astype(np.float32)
    scales[256:] = np.where(np.arange(44) % 2 == 0, 1.0, 11.0)
    w = np.zeros((300, 32), np.float32)
    w[:, 0] = scales
    packed = quantize_nf4_array(w.reshape(100, 96), 32)
    m = np.float32(scales.astype(np.float64).sum() / 300)
    assert packed["offset"][0] == m
    t = [np.abs(scales[:256] - m).max(), np.abs(scales[256:] - m).max()]
    assert packed["group_range"].tolist() == [float(x) for x in t]


def test_bits_per_weight_at_block_64():
    w = rt.nf4_quantize(np.random.default_rng(0).standard_normal((256, 1024)), 64)
    assert w.nbytes == 131072 + 4096 + 16 * 4 + 4
    assert round(w.bits_per_weight, 2) == 4.13
    plain = rt.nf4_quantize(np.ones((256, 1024)), 64, double_quant=False)
    assert plain.bits_per_weight == 4.5


@pytest.mark.parametrize("double_quant", [False, True])
@pytest.mark.parametrize("block_size", [32, 64, 256, 4096])
def test_dequantization_error_is_bounded(block_size, double_quant):
    rng = np.random.default_rng(block_size)
    w = (rng.standard_normal((96, 160)) * rng.uniform(0.01, 3.0, (96, 1))).astype(np.float32)
    packed = quantize_nf4_array(w, block_size, double_quant)
    args = (packed.get("group_range"), float(packed.get("offset", [0.0])[0]))
    back = dequantize_nf4_array(packed["codes"], packed["absmax"], *args, w.shape, block_size)
    flat = np.zeros(-(-w.size // block_size) * block_size, np.float32)
    flat[: w.size] = w.reshape(-1)
    true_scale = np.repeat(np.abs(flat.reshape(-1, block_size)).max(axis=1), block_size)[: w.size]
    half_gap = np.diff(NF4_CODEBOOK.astype(np.float64)).max() / 2
    bound = true_scale * (half_gap + 1e-6)
    if double_quant:
        t = np.repeat(packed["group_range"], NF4_SCALE_GROUP * block_size)[: w.size]
        bound = bound + t / 254 * (1 + 1e-6)
    err = np.abs(back.reshape(-1).astype(np.float64) - w.reshape(-1))
    assert np.all(err <= bound)
    # Relative to its block's scale, the typical error is a fraction of a code gap.
    assert np.sqrt(np.mean((err / true_scale) ** 2)) < 0.05


def test_refusals():
    with pytest.raises(ValueError, match="block_size"):
        rt.nf4_quantize(np.ones((2, 64)), 48)
    with pytest.raises(ValueError, match="non-finite"):
        rt.nf4_quantize(np.array([[1.0, np.nan]]), 32)
    with pytest.raises(rt.ShapeError):
        rt.nf4_quantize(np.ones(64), 32)
    w = rt.nf4_quantize(np.ones((2, 64)), 32)
    with pytest.raises(rt.ShapeError, match="codes"):
        NF4Weight((2, 66), 32, w.codes, w.absmax, w.group_range, w.offset)
    with pytest.raises(rt.ShapeError, match=r"\[\.\.\., 64\]"):
        rt.nf4_linear(rt.ones((3, 63)), w)
    with pytest.raises(rt.DTypeError):
        rt.nf4_linear(rt.ones((3, 64)).astype(rt.int64), w)
    with pytest.raises(rt.ShapeError, match="bias"):
        rt.nf4_linear(rt.ones((3, 64)), w, rt.ones(3))
    with pytest.raises(rt.CapabilityMissing, match="nf4_linear"):
        rt.Backend().nf4_linear(None, (1,), None, None, None, 0.0, (1, 1), 32, None)


def test_kernel_refuses_inconsistent_buffers():
    cpu = rt.get_backend("cpu")
    w = rt.nf4_quantize(np.ones((2, 64)), 32)
    x = cpu.from_numpy(np.ones((1, 64), np.float32))
    with pytest.raises(rt.KernelError, match="code bytes"):
        cpu.nf4_linear(
            x,
            (1, 64),
            w.codes._data[:-1].copy(),
            w.absmax._data,
            w.group_range._data,
            w.offset,
            (2, 64),
            32,
            None,
        )
    with pytest.raises(rt.KernelError, match="block size"):
        cpu.nf4_linear(
            x,
            (1, 64),
            w.codes._data,
            w.absmax._data,
            w.group_range._data,
            w.offset,
            (2, 64),
            48,
            None,
        )


def test_listed_as_capabilities():
    for name in ("nf4_dequantize", "nf4_linear", "nf4_linear_backward"):
        assert rt.CAPABILITIES[name] == 4 <= rt.BACKEND_API_VERSION[1]
        assert name in type(rt.get_backend("cpu")).__dict__


# -- kernels on every backend ------------------------------------------------------------
CASES = [
    # rows, cols, block size, double quantization, leading shape of x
    (64, 64, 64, True, (5,)),
    (70, 45, 32, True, (2, 3)),  # odd element count, rows and cols off the tile size
    (130, 257, 128, False, (4,)),
    (3, 4096, 4096, True, (1,)),
    (600, 40, 32, True, (2,)),  # 750 blocks: three scale groups
    # One input row (the decode step): read from the codes directly.
    (1536, 384, 64, True, (1,)),
    (70, 45, 32, False, ()),  # rows start on a high nibble; tails inside blocks
    (33, 200, 128, True, (1, 1)),
]


def weight_for(backend, rows, cols, block_size, double_quant, seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.2).astype(np.float32)
    return rt.nf4_quantize(w, block_size, double_quant, backend=backend)


def dense(w: NF4Weight) -> np.ndarray:
    a = w.arrays()
    offset = float(a["offset"][0]) if w.double_quant else 0.0
    return dequantize_nf4_array(
        a["codes"], a["absmax"], a.get("group_range"), offset, w.shape, w.block_size
    )


@pytest.mark.parametrize("rows, cols, block_size, double_quant, lead", CASES)
def test_dequantize_is_the_numpy_formula_exactly(
    backend, rows, cols, block_size, double_quant, lead
):
    w = weight_for(backend, rows, cols, block_size, double_quant)
    got = rt.nf4_dequantize(w)
    assert (
        got.shape == (rows, cols) and got.dtype is rt.float32 and got.backend.name == backend.name
    )
    assert np.array_equal(got.numpy(), dense(w))


@pytest.mark.parametrize("rows, cols, block_size, double_quant, lead", CASES)
def test_linear_and_input_gradient_match_the_dense_weight(
    backend, rows, cols, block_size, double_quant, lead
):
    w = weight_for(backend, rows, cols, block_size, double_quant)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((*lead, cols)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    d = dense(w).astype(np.float64)
    y = rt.nf4_linear(rt.from_numpy(x, backend=backend), w, rt.from_numpy(bias, backend=backend))
    assert y.shape == (*lead, rows)
    np.testing.assert_allclose(y.numpy(), x @ d.T + bias, rtol=1e-4, atol=1e-4)
    y0 = rt.nf4_linear(rt.from_numpy(x, backend=backend), w)
    np.testing.assert_allclose(y0.numpy(), x @ d.T, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal((*lead, rows)).astype(np.float32)
    dx = rt.nf4_linear_backward(rt.from_numpy(g, backend=backend), w)
    assert dx.shape == (*lead, cols)
    np.testing.assert_allclose(dx.numpy(), g @ d, rtol=1e-4, atol=1e-4)


def test_moves_between_backends(backend):
    w = weight_for("cpu", 8, 64, 32, True)
    moved = w.to(backend)
    assert moved.backend.name == backend.name and moved.identity == w.identity
    assert np.array_equal(rt.nf4_dequantize(moved).numpy(), dense(w))


def test_cpu_results_do_not_depend_on_the_thread_count():
    w = weight_for("cpu", 300, 384, 64, True)
    x = rt.from_numpy(np.random.default_rng(2).standard_normal((40, 384)).astype(np.float32))
    g = rt.from_numpy(np.random.default_rng(3).standard_normal((40, 300)).astype(np.float32))
    before = rt.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            results.append(
                (rt.nf4_linear(x, w).numpy().copy(), rt.nf4_linear_backward(g, w).numpy().copy())
            )
    finally:
        rt.set_num_threads(before)
    for y, dx in results[1:]:
        assert np.array_equal(y, results[0][0]) and np.array_equal(dx, results[0][1])


def test_one_row_does_not_depend_on_the_thread_count():
    w = weight_for("cpu", 1000, 384, 64, True)
    x = rt.from_numpy(np.random.default_rng(2).standard_normal((1, 384)).astype(np.float32))
    before = rt.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            results.append(rt.nf4_linear(x, w).numpy().copy())
    finally:
        rt.set_num_threads(before)
    np.testing.assert_allclose(results[0], x.numpy() @ dense(w).T, rtol=1e-4, atol=1e-4)
    for y in results[1:]:
        assert np.array_equal(y, results[0])


def test_identity_follows_the_content():
    a = weight_for("cpu", 4, 64, 32, True, seed=0)
    b = weight_for("cpu", 4, 64, 32, True, seed=0)
    c = weight_for("cpu", 4, 64, 32, True, seed=1)
    d = weight_for("cpu", 4, 64, 64, True, seed=0)
    assert a.identity == b.identity
    assert len({a.identity, c.identity, d.identity}) == 3
